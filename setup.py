"""The compiled parts (optional): the first filter of this Python's core.

On 3.12+ the ``sys.monitoring`` callback's clean-site test (``_fastclean``); on 3.11 the
``sys.setprofile`` hook's filter (``_fastprofile``). Where they cannot be built (no C
compiler), the package installs without them and runs the same tests in Python: slower
per watched call, the same verdicts.
"""

import sys

from setuptools import Extension, setup

TRACER = "trackgen_contract/tracer"

if sys.version_info >= (3, 12):
    extension = Extension(
        "trackgen_contract.tracer._fastclean",
        [f"{TRACER}/_fastclean.c", f"{TRACER}/_callerframe.c"],
        depends=[f"{TRACER}/_callerframe.h"],
        optional=True,
    )
else:
    extension = Extension(
        "trackgen_contract.tracer._fastprofile", [f"{TRACER}/_fastprofile.c"], optional=True
    )

setup(ext_modules=[extension])
