"""The compiled part: the ``sys.monitoring`` callback's clean-site test (optional).

Where it cannot be built (no C compiler), the package installs without it and runs the
same test in Python: slower per clean call, the same verdicts.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trackgen_contract.tracer._fastclean",
            ["trackgen_contract/tracer/_fastclean.c"],
            optional=True,
        )
    ]
)
