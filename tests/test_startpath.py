"""The working directory that ``python -m trackgen_contract.trace`` puts on sys.path is
set aside while the command line imports itself, and only then (startpath)."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from trackgen_contract import startpath

ROOT = Path(__file__).resolve().parents[1]
TRACE = startpath.COMMAND


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["-m", TRACE, "prog.py"], TRACE),
        ([f"-m{TRACE}", "prog.py"], TRACE),
        (["-Bm", TRACE], TRACE),
        ([f"-Bm{TRACE}"], TRACE),
        (["-X", "dev", "-W", "error", "-m", TRACE], TRACE),
        (["-Xpycache_prefix=/tmp/pm", "-m", TRACE], TRACE),  # a value that ends in m
        (["-Wignore::UserWarning:mm", "-m", TRACE], TRACE),
        (["--check-hash-based-pycs", "always", "-m", TRACE], TRACE),
        # the program's own arguments are not the interpreter's
        (["-mmypkg.cli", "-m", TRACE], "mypkg.cli"),
        (["-m", "mypkg.cli", "-m", TRACE], "mypkg.cli"),
        (["-Bmmypkg.cli", "--opt", "-m", TRACE], "mypkg.cli"),
        (["-c", "import x", "-m", TRACE], None),
        (["-Bc", "import x", "-m", TRACE], None),
        (["script.py", "-m", TRACE], None),
        (["-", "-m", TRACE], None),
        (["--", "script.py", "-m", TRACE], None),
    ],
)
def test_the_module_run_is_read_as_python_reads_its_options(monkeypatch, argv, module):
    monkeypatch.setattr(sys, "orig_argv", ["python", *argv])
    assert startpath._module_run() == module


def _run(argv, cwd, **env):
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=300,
    )


def test_a_program_whose_package_imports_this_one_keeps_its_directory(tmp_path):
    # Python imports mypkg (and this package with it) while sys.argv[0] is "-m": the
    # program's own `-m trackgen_contract.trace` arguments must not make it set aside.
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("import trackgen_contract\n")
    (tmp_path / "mypkg" / "cli.py").write_text("import helper\nprint(helper.X)\n")
    (tmp_path / "helper.py").write_text("X = 1\n")
    for spelling in (["-m", "mypkg.cli"], ["-mmypkg.cli"]):
        done = _run([*spelling, "--opt", "-m", TRACE], tmp_path)
        assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr


def test_the_package_imports_nothing_from_the_directory_before_setting_it_aside(tmp_path):
    # An installed copy has not loaded __future__ when the package is first imported (an
    # editable install's finder has): without the site module, as such a copy.
    (tmp_path / "__future__.py").write_text("open('future-ran', 'w').close()\n")
    (tmp_path / "prog.py").write_text("print('plain')\n")
    path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    done = _run(["-S", "-m", TRACE, "prog.py"], tmp_path, PYTHONPATH=path)
    assert "plain" in done.stdout, done.stderr
    assert not (tmp_path / "future-ran").exists()
