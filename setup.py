"""The compiled parts (optional): the first filter of this Python's core.

On 3.12+ the ``sys.monitoring`` callback's clean-site test (``_fastclean``); on 3.11 the
``sys.setprofile`` hook's filter (``_fastprofile``). Where they cannot be built (no C
compiler), the package installs without them and runs the same tests in Python: slower
per watched call, the same verdicts.
"""

import sys

from setuptools import Extension, setup

if sys.version_info >= (3, 12):
    name = "_fastclean"
else:
    name = "_fastprofile"

setup(
    ext_modules=[
        Extension(
            f"trackgen_contract.tracer.{name}",
            [f"trackgen_contract/tracer/{name}.c"],
            optional=True,
        )
    ]
)
