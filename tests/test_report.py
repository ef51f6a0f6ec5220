"""What the command line's report says: rows a user can act on, the calls by the names the
user called, and the user's lines in a program Warp ships. Through a subprocess."""

import shlex
import subprocess
import sys

import pytest
from test_cli import BREACHES, load, program, trace

from trackgen_contract.trace import CLEAN

WAVE = "warp.examples.core.example_wave"


@pytest.fixture(scope="module")
def wave(tmp_path_factory):
    """One run of a Warp example as Warp documents running it, under the command line."""
    out = tmp_path_factory.mktemp("wave") / "r.json"
    args = ("--device", "cpu", "--stage-path", "None", "--num-frames", "20")
    status, _, err = trace("--json", out, "-m", WAVE, *args)
    document = load(out)
    if document["program_status"] != 0 and _plain_run_fails(WAVE, *args):
        pytest.skip(f"{WAVE} fails with these arguments even without the tracer")
    return status, err, document


def _plain_run_fails(module, *args):
    """Whether the installed Warp's example fails run plainly (an older Warp's example
    needs USD for its output)."""
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, timeout=300)
    return done.returncode != 0


def test_a_warp_example_names_its_own_lines(wave):
    status, err, document = wave
    assert status == BREACHES, err
    sites = [b["site"] for b in document["breaches"]]
    assert sites and all(s["filename"].endswith("example_wave.py") for s in sites)
    assert {s["function"] for s in sites} >= {"Example.__init__", "Example.step"}
    assert "example_wave.py:" in err and "<frozen runpy>" not in err
    launches = [b for b in document["breaches"] if b["api"] == "wp.launch without stream="]
    assert sum(b["count"] for b in launches) > 0
    assert all(b["site"]["path"].startswith("warp/examples/core/") for b in launches)


def test_the_calls_table_names_what_the_program_called(wave):
    _, err, document = wave
    calls = {(c["api"], c["inside"]): c for c in document["calls"]}
    assert ("wp.zeros", None) in calls and ("wp.array", None) in calls
    assert not any(api.startswith("wp.array._init_new") for api, _ in calls)
    # Warp's own memset inside wp.zeros is named as Warp's, and is no breach
    zero = calls["wp.array.zero_", "wp.zeros"]
    assert zero["breaches"] == 0
    # the copy wp.array(data) makes for the program is counted as the program's
    assert calls["wp.copy", "wp.array"]["breaches"] == 1
    table = err.split("Warp calls seen")[1]
    assert "wp.array.zero_ (inside wp.zeros)" in table
    assert "(inside X): a call Warp made itself while running X for the program" in table


ONE_LINE_TWO_KEYS = """\
import warp as wp
a = wp.zeros(4, dtype=float, device="cpu")
for _ in range(2):
    seen = (a.numpy(), str(a))   # two readbacks from one line: ours, and Warp's __str__
"""


def test_one_row_per_site_with_every_key_and_its_allow_text(tmp_path):
    path = program(tmp_path, ONE_LINE_TWO_KEYS)
    status, _, err = trace("--checks", "host_sync", "--json", tmp_path / "r.json", path)
    assert status == BREACHES, err
    document = load(tmp_path / "r.json")
    [row] = document["breaches"]
    assert (row["api"], row["count"], row["site"]["lineno"]) == ("wp.array.numpy()", 4, 4)
    keys = [tuple(k) for k in row["keys"]]
    assert ("wp.array.numpy", "__main__", "<module>") in keys
    assert any(k[2] == "array.__str__" for k in keys)  # Warp's own caller: its key is shown
    assert err.count("wp.array.numpy()  <module>") == 1  # one row, not one per key
    texts = [line.split("to allow it: ")[1] for line in err.splitlines() if "to allow it:" in line]
    assert len(texts) == 2
    assert "allow=[('wp.array.numpy', '__main__', '<module>')]" in err
    # The printed text works, pasted as it is.
    options = [word for text in texts for word in shlex.split(text.split("  (or ")[0])]
    status, _, err = trace("--checks", "host_sync", *options, path)
    assert status == CLEAN, err
    assert "let through (not breaches):" in err


def test_allow_text_from_a_guard_report_works_in_allow_argument(tmp_path):
    # The allow= form printed by the report, used with the guard API.
    path = program(
        tmp_path,
        ONE_LINE_TWO_KEYS
        + "from trackgen_contract import hot_path_guard\n"
        + "with hot_path_guard(allocation=False, stream=False, allow=ALLOW) as g:\n"
        + "    seen = (a.numpy(), str(a))\n",
    )
    _, _, err = trace("--checks", "host_sync", path)
    allow = [line.split("(or allow=")[1][:-1] for line in err.splitlines() if "(or allow=" in line]
    assert len(allow) == 2
    path.write_text(path.read_text().replace("ALLOW", " + ".join(allow)))
    status, _, err = trace("--checks", "host_sync", path)
    assert status == BREACHES, err  # the program ran to its end: its guard let both through
    assert "HotPathViolation" not in err


def test_status_and_breach_count_in_json(tmp_path):
    path = program(tmp_path, ONE_LINE_TWO_KEYS + "import sys\nsys.exit(4)\n")
    status, _, err = trace("--json", tmp_path / "r.json", path)
    document = load(tmp_path / "r.json")
    assert status == document["exit_status"] == document["program_status"] == 4, err
    assert document["breach_count"] == 5  # the report is made either way
    assert "the program failed" in document["outcome"]


def test_exit_status_is_said_in_words(tmp_path):
    _, _, err = trace("--checks", "host_sync", program(tmp_path, ONE_LINE_TWO_KEYS))
    assert err.rstrip().endswith(
        f"exit status {BREACHES}: breaches found in a program that otherwise succeeded"
    )
