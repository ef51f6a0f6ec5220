"""The package's public names: each imported from its own module at its first use."""

import ast
import subprocess
import sys
from importlib import import_module

import pytest

import trackgen_contract


def _loaded_after(code: str) -> list[str]:
    """The package's modules a fresh interpreter holds after running `code`."""
    script = (
        f"{code}\nimport sys\n"
        "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'trackgen_contract'))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout)


def test_importing_the_package_imports_none_of_its_machinery():
    assert _loaded_after("import trackgen_contract") == [
        "trackgen_contract",
        "trackgen_contract.startpath",
    ]


@pytest.mark.parametrize("name", trackgen_contract.__all__)
def test_every_public_name_is_its_modules_own_object(name):
    home = import_module(f"trackgen_contract.{trackgen_contract._HOMES[name]}")
    expected = home if home.__name__.endswith("." + name) else getattr(home, name)
    assert getattr(trackgen_contract, name) is expected
    assert name in dir(trackgen_contract)


def test_the_public_names_are_the_ones_the_package_knows_the_home_of():
    assert sorted(trackgen_contract.__all__) == sorted(trackgen_contract._HOMES)


def test_star_import_gives_every_public_name():
    namespace: dict = {}
    exec("from trackgen_contract import *", namespace)
    assert set(trackgen_contract.__all__) <= set(namespace)


def test_a_submodule_is_an_attribute_as_when_the_package_imported_it():
    # `import trackgen_contract` then `trackgen_contract.tracer.keep_armed()`, as README
    # spells it, worked while the package imported every module at once.
    assert (
        _loaded_after("import trackgen_contract\nassert trackgen_contract.tracer.keep_armed").count(
            "trackgen_contract.tracer"
        )
        == 1
    )


@pytest.mark.parametrize("name", ["nothing", "__wrapped__", "a.b", "tracer.nothing", ""])
def test_an_unknown_name_is_an_attribute_error_naming_it(name):
    with pytest.raises(AttributeError, match="has no attribute"):
        getattr(trackgen_contract, name)
    assert not hasattr(trackgen_contract, name)
