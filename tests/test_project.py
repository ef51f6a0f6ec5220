"""How a report names files: the same on every machine, wherever the environment lives."""

import sys

import pytest

from trackgen_contract.project import portable_path, project_root


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    venv = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    (venv / "warp" / "examples").mkdir(parents=True)
    (tmp_path / "src" / "acme").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "src"), str(venv), *sys.path])
    return tmp_path


def test_a_file_of_the_project_is_named_from_its_root(project):
    path = project / "src" / "acme" / "gen.py"
    assert portable_path(str(path), project_root(project)) == "src/acme/gen.py"


def test_an_installed_file_is_named_from_site_packages_even_in_a_venv_inside_the_project(
    project,
):
    path = project / ".venv/lib/python3/site-packages/warp/examples/example_wave.py"
    assert portable_path(str(path), project_root(project)) == "warp/examples/example_wave.py"


def test_a_file_outside_the_project_is_named_from_its_sys_path_entry(project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "lib").mkdir()
    sys.path.insert(0, str(elsewhere))
    path = elsewhere / "lib" / "mod.py"
    assert portable_path(str(path), project_root(project)) == "lib/mod.py"


def test_a_file_nowhere_known_keeps_its_name(project):
    assert portable_path("/nowhere/at/all.py", project_root(project)) == "/nowhere/at/all.py"
    assert portable_path("<string>", project_root(project)) == "<string>"


def test_the_project_files_are_read_from_module_namespaces_only(project, monkeypatch):
    import types

    from trackgen_contract.project import project_files

    mine = project / "src" / "acme" / "gen.py"
    mine.write_text("")
    linked = project / "src" / "acme" / "linked.py"
    outside = project.parent / "elsewhere_linked.py"
    outside.write_text("")
    linked.symlink_to(outside)
    reads = []

    class Lazy(types.ModuleType):
        def __getattr__(self, name):
            reads.append(name)
            raise AttributeError(name)

    module = types.ModuleType("acme.gen")
    module.__file__ = str(mine)
    into = types.ModuleType("acme.into")
    into.__file__ = str(project.parent / "into.py")
    (project.parent / "into.py").symlink_to(mine)
    monkeypatch.setitem(sys.modules, "acme.gen", module)
    monkeypatch.setitem(sys.modules, "acme.into", into)
    monkeypatch.setitem(sys.modules, "acme.lazy", Lazy("acme.lazy"))
    monkeypatch.setitem(sys.modules, "acme.linked", types.ModuleType("acme.linked"))
    sys.modules["acme.linked"].__file__ = str(linked)
    found = project_files(project)
    assert reads == []  # a module's __getattr__ is its own code: never run
    assert str(mine.resolve()) in found  # also as reached through a link from outside
    assert str(outside.resolve()) not in found  # a link out of the project is not its file
