"""What a guard costs, side by side with a monkeypatching guard, in one process.

    python benchmarks/overhead.py            # the full run (seconds)
    python benchmarks/overhead.py --quick    # a smoke run, for CI
    python benchmarks/overhead.py --json out.json

Each workload runs with no guard, under this package's guard (the backend of this Python:
``sys.monitoring`` on 3.12+, ``sys.setprofile`` on 3.11) and under the monkeypatching
reference guard in ``monkeypatch_guard.py``. Configurations take turns in rotated order
within each round, after a warm-up, with the garbage collector off; a guard is entered
before and left after the timed loop. Each ratio is the median over rounds of the
configuration's time over the unguarded time of the same round.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import heading, machine
from monkeypatch_guard import MonkeypatchGuard

from trackgen_contract import hot_path_guard, stream_explicit, tracer
from trackgen_contract.registry import installed
from trackgen_contract.tracer import COMPILED, keep_armed

if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
else:
    wp.config.quiet = True


@wp.kernel
def bump(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] + 1.0


A = wp.zeros(16, dtype=float, device="cpu")
B = wp.zeros(16, dtype=float, device="cpu")
STATE = {"n": 0}


class NoOpCallback:
    """The floor: the same events a guard arms, with a callback that does nothing (a
    ``sys.monitoring`` PY_START callback on the watched code objects; on 3.11 an empty
    profile function in this thread)."""

    def __enter__(self) -> NoOpCallback:
        if sys.version_info < (3, 12):
            sys.setprofile(_empty_profile)
            return self
        monitoring = sys.monitoring
        self.tool = next(i for i in (3, 4, 5, 2, 1, 0) if monitoring.get_tool(i) is None)
        monitoring.use_tool_id(self.tool, "benchmark floor")
        monitoring.register_callback(self.tool, monitoring.events.PY_START, _no_op)
        for entry in installed():
            monitoring.set_local_events(self.tool, entry.code, monitoring.events.PY_START)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if sys.version_info < (3, 12):
            sys.setprofile(None)
            return
        monitoring = sys.monitoring
        for entry in installed():
            monitoring.set_local_events(self.tool, entry.code, 0)
        monitoring.register_callback(self.tool, monitoring.events.PY_START, None)
        monitoring.free_tool_id(self.tool)


def _no_op(code: object, offset: int) -> None:
    return None


def _empty_profile(frame: object, event: str, arg: object) -> None:
    return None


class PythonCallbackGuard:
    """The guard with its core's first filter in Python alone, as where the C extension
    is not built: a row beside the compiled guard's. (The ``sys.monitoring`` callback is
    made anew while nothing is armed, then put back; a profile hook is installed at each
    start.)"""

    def __enter__(self) -> PythonCallbackGuard:
        core = tracer._core
        self.saved = (
            core.compiled,
            getattr(core, "_callback", None),
            getattr(core, "_on_start", None),
        )
        core.compiled = False
        if hasattr(core, "_callback"):
            core._callback = None
        self.guard = hot_path_guard(strict=False)
        self.guard.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.guard.__exit__(*exc_info)
        core = tracer._core
        core.compiled = self.saved[0]
        if hasattr(core, "_callback"):
            core._callback, core._on_start = self.saved[1:]


GUARDS: dict[str, Callable[[], AbstractContextManager]] = {
    "none": nullcontext,
    "guard": lambda: hot_path_guard(strict=False),
    "monkeypatch": MonkeypatchGuard,
}
FLOOR = "no-op callback" if sys.version_info >= (3, 12) else "empty profile function"
PURE = "Python filter, no C extension"
# The rows that compare with the floor also show the guard without its compiled part.
BESIDE: dict[str, Callable[[], AbstractContextManager]] = {FLOOR: NoOpCallback}
if COMPILED:
    BESIDE[PURE] = PythonCallbackGuard


# --- workloads: each takes a repeat count --------------------------------------------------


def launches(n: int) -> None:
    for _ in range(n):
        wp.launch(bump, dim=16, inputs=[A], device="cpu", stream=None)


OPTIONS = {"device": "cpu", "stream": None}


def launches_with_options(n: int) -> None:
    for _ in range(n):
        wp.launch(bump, dim=16, inputs=[A], **OPTIONS)


def tiled(n: int) -> None:
    for _ in range(n):  # Warp's launch_tiled calls launch(*args, **kwargs) itself
        wp.launch_tiled(bump, dim=[16], inputs=[A], block_dim=1, device="cpu", stream=None)


COMMAND = wp.launch(bump, dim=16, inputs=[A], device="cpu", record_cmd=True)


def recorded(n: int) -> None:
    command = COMMAND
    for _ in range(n):
        command.launch(stream=None)


class Replayer:
    """Where recorded launches usually live: an object that replays its own."""

    def __init__(self) -> None:
        self.command, self.stream = COMMAND, None
        self.commands = [COMMAND]
        self.graphs = {"forward": COMMAND}

    def replay(self, n: int) -> None:
        for _ in range(n):
            self.command.launch(stream=self.stream)

    def replay_listed(self, n: int) -> None:
        commands, i = self.commands, 0
        for _ in range(n):
            commands[i].launch(stream=self.stream)

    def replay_named(self, n: int) -> None:
        graphs, name = self.graphs, "forward"
        for _ in range(n):
            graphs[name].launch(stream=self.stream)


def mixed(n: int) -> None:
    for _ in range(n):
        wp.launch(bump, dim=16, inputs=[A], device="cpu", stream=None)
        wp.copy(B, A, stream=None)
        A.numpy()
        wp.synchronize()


def bookkeeping(state: dict, i: int) -> None:
    state["n"] += i


def python_heavy(ratio: int) -> Callable[[int], None]:
    def work(n: int) -> None:
        state = STATE
        for _ in range(n):
            wp.launch(bump, dim=16, inputs=[A], device="cpu", stream=None)
            for i in range(ratio):
                bookkeeping(state, i)

    return work


def ordinary(n: int) -> None:
    state = STATE
    for i in range(n):
        bookkeeping(state, i)


# --- measurement ---------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    unit: str  # "x" (ratio to no guard), "us" or "ns"
    values: dict[str, float] = field(default_factory=dict)


def _timed(
    work: Callable[[int], None],
    n: int,
    guard: Callable[[], AbstractContextManager],
    background: bool,
) -> float:
    if background:
        return _timed_beside_a_guard(work, n, guard)
    with guard():
        work(max(1, n // 20))  # warm the caches of this configuration
        start = time.perf_counter()
        work(n)
        return time.perf_counter() - start


def _timed_beside_a_guard(
    work: Callable[[int], None], n: int, guard: Callable[[], AbstractContextManager]
) -> float:
    """Time `work` in this thread while another thread holds a guard."""
    entered, done = threading.Event(), threading.Event()

    def hold() -> None:
        with guard():
            entered.set()
            done.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait()
    try:
        work(max(1, n // 20))
        start = time.perf_counter()
        work(n)
        return time.perf_counter() - start
    finally:
        done.set()
        holder.join()


def ratios(
    name: str,
    work: Callable[[int], None],
    n: int,
    rounds: int,
    background: bool = False,
    floor: bool = False,
) -> list[Result]:
    """The workload's ratio under each guard (and, with `floor`, rows for the no-op
    callback and the Python callback, measured in the same rounds)."""
    configs = {**GUARDS, **BESIDE} if floor else GUARDS
    names = list(configs)
    per_round: dict[str, list[float]] = {g: [] for g in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        times = {g: _timed(work, n, configs[g], background) for g in order}
        for g in names:
            per_round[g].append(times[g] / times["none"])
    medians = {g: statistics.median(v) for g, v in per_round.items()}
    rows = [Result(name, "x", {g: medians[g] for g in GUARDS if g != "none"})]
    if floor:
        rows.append(Result(f"{name}: {FLOOR} (the floor)", "x", {"guard": medians[FLOOR]}))
        if PURE in medians:
            rows.append(Result(f"{name}: {PURE}", "x", {"guard": medians[PURE]}))
    return rows


def per_call(
    name: str, work: Callable[[int], None], n: int, rounds: int, pure: bool = False
) -> list[Result]:
    """Nanoseconds a guard adds to each call of `work`'s loop (and, with `pure`, the
    guard with the Python callback alone, in the same rounds)."""
    configs = {**GUARDS, PURE: BESIDE[PURE]} if pure and PURE in BESIDE else GUARDS
    names = list(configs)
    added: dict[str, list[float]] = {g: [] for g in names if g != "none"}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        times = {g: _timed(work, n, configs[g], False) for g in order}
        for g in added:
            added[g].append((times[g] - times["none"]) / n * 1e9)
    medians = {g: statistics.median(v) for g, v in added.items()}
    rows = [Result(name, "ns", {g: medians[g] for g in GUARDS if g != "none"})]
    if PURE in medians:
        rows.append(Result(f"{name}: {PURE}", "ns", {"guard": medians[PURE]}))
    return rows


def _enter_exit_us(make: Callable[[], AbstractContextManager], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        guard = make()
        start = time.perf_counter()
        with guard:
            pass
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def enter_exit(modules: int, rounds: int) -> Result:
    """Microseconds to enter and leave a guard with `modules` modules imported."""
    _import_synthetic_modules(modules)
    values = {name: _enter_exit_us(GUARDS[name], rounds) for name in ("guard", "monkeypatch")}
    return Result(f"enter + exit, {len(sys.modules)} modules imported", "us", values)


def enter_exit_kinds(rounds: int) -> list[Result]:
    """A stream-only guard on its own, and guards inside an armed scope (the pytest
    session and the command line hold one)."""
    stream_only = lambda: stream_explicit(strict=False)  # noqa: E731
    full = GUARDS["guard"]
    rows = [
        Result(
            "enter + exit, stream-only guard",
            "us",
            {
                "guard": _enter_exit_us(stream_only, rounds),
                "monkeypatch": _enter_exit_us(GUARDS["monkeypatch"], rounds),
            },
        )
    ]
    with keep_armed():
        rows.append(
            Result(
                "enter + exit inside keep_armed()",
                "us",
                {"guard": _enter_exit_us(full, rounds)},
            )
        )
        rows.append(
            Result(
                "enter + exit inside keep_armed(), stream-only",
                "us",
                {"guard": _enter_exit_us(stream_only, rounds)},
            )
        )
    return rows


_SYNTHETIC = Path(tempfile.mkdtemp(prefix="tc_bench_modules_"))


def _import_synthetic_modules(total: int) -> None:
    """Import small modules until `total` are imported; a few bind Warp functions."""
    if str(_SYNTHETIC) not in sys.path:
        sys.path.insert(0, str(_SYNTHETIC))
    i = 0
    while len(sys.modules) < total:
        name = f"tc_bench_{i:05d}"
        i += 1
        if name in sys.modules:
            continue
        path = _SYNTHETIC / f"{name}.py"
        if not path.exists():
            body = "from warp import launch, copy\n" if i % 50 == 0 else ""
            path.write_text(body + "".join(f"value_{k} = {k}\n" for k in range(20)))
        __import__(name)


def run(quick: bool) -> list[Result]:
    n = 200 if quick else 1000
    rounds = 5 if quick else 15
    gc.disable()
    try:
        launches(50)  # build and load the kernels first
        tiled(50)
        recorded(50)
        results = [
            *ratios("real Warp: launch loop, stream= passed", launches, n, rounds, floor=True),
            *ratios(
                "launch loop, stream= in **options", launches_with_options, n, rounds, floor=True
            ),
            *ratios("launch_tiled loop, stream= passed", tiled, n, rounds, floor=True),
            *ratios("recorded cmd.launch(stream=) loop", recorded, n, rounds, floor=True),
            *ratios(
                "recorded self.command.launch(stream=) loop",
                Replayer().replay,
                n,
                rounds,
                floor=True,
            ),
            *ratios(
                "recorded commands[i].launch(stream=) loop",
                Replayer().replay_listed,
                n,
                rounds,
                floor=True,
            ),
            *ratios(
                "recorded graphs[name].launch(stream=) loop",
                Replayer().replay_named,
                n,
                rounds,
                floor=True,
            ),
            *ratios(
                "real Warp: launch + copy + readback + sync", mixed, n // 4, rounds, floor=True
            ),
        ]
        for ratio in (0, 10, 100, 1000):
            count = max(4, n // max(1, ratio // 10)) if ratio else n
            results += ratios(f"Python-heavy: M/N = {ratio}", python_heavy(ratio), count, rounds)
        results += [
            *ratios("another thread guarded: launch loop here", launches, n, rounds, True),
            *ratios(
                "another thread guarded: M/N = 1000 here",
                python_heavy(1000),
                max(4, n // 100),
                rounds,
                True,
            ),
            *per_call("per watched call (launch)", launches, n * 2, rounds * 3, pure=True),
            *per_call(
                "per watched call (recorded cmd.launch)", recorded, n * 2, rounds * 3, pure=True
            ),
            *per_call("per unwatched call", ordinary, n * 100, rounds),
            *enter_exit_kinds(rounds * 4),
            enter_exit(300, rounds * 4),
            enter_exit(3000, rounds * 4),
        ]
    finally:
        gc.enable()
    return results


def table(results: list[Result], facts: dict[str, object]) -> str:
    guard = f"guard ({facts['backend']})"
    width = max(len(r.name) for r in results)
    lines = [
        heading(facts),
        "",
        f"| {'workload':<{width}} | {guard:>24} | {'monkeypatch reference':>22} |",
        f"|{'-' * (width + 2)}|{'-' * 26}:|{'-' * 24}:|",
    ]
    for r in results:
        cells = [
            _cell(r.values[g], r.unit) if g in r.values else "-" for g in ("guard", "monkeypatch")
        ]
        lines.append(f"| {r.name:<{width}} | {cells[0]:>24} | {cells[1]:>22} |")
    return "\n".join(lines)


def _cell(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.3f}x"
    if unit == "us":
        return f"{value:,.0f} us"
    return f"{value:,.0f} ns"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, for CI")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    facts = machine()
    results = run(args.quick)
    print(table(results, facts))
    if args.json:
        document = {
            "machine": facts,
            "quick": args.quick,
            "results": [{"name": r.name, "unit": r.unit, **r.values} for r in results],
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
