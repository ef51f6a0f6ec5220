"""Guards under load: many enter/exit cycles, many threads, a Ctrl-C storm, forks.

    python benchmarks/stress.py            # the full run (a few minutes)
    python benchmarks/stress.py --quick    # a smoke run (well under a minute)
    python benchmarks/stress.py --json out.json

Prints one table, for the README's reliability section:

- enter + exit cycles per second of a guard with a clean launch inside, and the process's
  memory (RSS) and live Python objects before and after 100,000 of them (after a warm-up);
- N threads, each entering and exiting its own guard with a clean launch and one breach
  inside, for a few seconds: cycles, cycles per second, records that were wrong (a guard
  must see its own thread's breach and no other's), and what was left armed afterwards;
- the Ctrl-C storm of ``tests/reliability/storm.py`` (SIGALRM raising KeyboardInterrupt at
  random points of guard and tracer enters and exits): cycles, interrupts, leaks found;
- forks made while another thread enters and exits guards
  (``tests/reliability/forks.py race``): children that worked, hung or went wrong.

Every number comes from this run; nothing is asserted (the tests do that).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import warp as wp

ROOT = Path(__file__).resolve().parent.parent
CHILDREN = ROOT / "tests" / "reliability"
sys.path.insert(0, str(ROOT / "tests"))
from helpers import leftovers  # noqa: E402
from machine import heading, machine  # noqa: E402

from trackgen_contract import hot_path_guard  # noqa: E402

if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
else:
    wp.config.quiet = True


@wp.kernel
def bump(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] + 1.0


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak is what the standard library offers
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cycles(count: int) -> dict[str, float]:
    """`count` enter/exit cycles of one guard around a clean launch."""
    a = wp.zeros(16, dtype=float, device="cpu")

    def cycle() -> None:
        with hot_path_guard():
            wp.launch(bump, dim=16, inputs=[a], device="cpu", stream=None)

    for _ in range(min(1_000, count)):  # warm-up: kernels, caches, allocator
        cycle()
    gc.collect()
    rss, objects = _rss_mib(), len(gc.get_objects())
    began = time.perf_counter()
    for _ in range(count):
        cycle()
    seconds = time.perf_counter() - began
    gc.collect()
    return {
        "cycles": count,
        "per_second": count / seconds,
        "rss_before": rss,
        "rss_after": _rss_mib(),
        "objects_before": objects,
        "objects_after": len(gc.get_objects()),
        "left": len(leftovers()),
    }


def threads(count: int, seconds: float) -> dict[str, float]:
    """`count` threads, each entering and exiting guards for `seconds`."""
    arrays = [wp.zeros(16, dtype=float, device="cpu") for _ in range(count)]
    done = [0] * count
    wrong = [0] * count
    errors: list[str] = []
    barrier = threading.Barrier(count + 1)
    stop = threading.Event()

    def worker(index: int) -> None:
        a = arrays[index]
        barrier.wait()
        try:
            while not stop.is_set():
                with hot_path_guard(strict=False) as guard:
                    wp.launch(bump, dim=16, inputs=[a], device="cpu", stream=None)
                    wp.zeros(1, dtype=float, device="cpu")  # this thread's one breach
                if [v.category for v in guard.violations] != ["allocation"]:
                    wrong[index] += 1
                done[index] += 1
        except BaseException as exc:
            errors.append(repr(exc))

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in pool:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    return {
        "threads": count,
        "seconds": elapsed,
        "cycles": sum(done),
        "per_second": sum(done) / elapsed,
        "wrong": sum(wrong),
        "errors": len(errors),
        "left": len(leftovers()),
    }


def child(script: str, *args: object, timeout: float) -> dict:
    """Run a child program of the tests and read its result."""
    command = [sys.executable, str(CHILDREN / script), *map(str, args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"problems": [f"hung for {timeout} s"]}
    lines = done.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        return {"problems": [f"ended with status {done.returncode}: {done.stderr[-300:]}"]}
    return json.loads(lines[-1])


def table(results: dict, facts: dict[str, object]) -> str:
    loop, load, storm, forks = (results[k] for k in ("cycles", "threads", "storm", "forks"))
    storm_problems = storm.get("problems", [])
    fork_outcomes = forks.get("outcomes", {})
    rows = [
        (
            f"enter + exit, {loop['cycles']:,} cycles (a clean launch inside)",
            f"{loop['per_second']:,.0f} cycles/s",
        ),
        (
            f"memory before / after {loop['cycles']:,} cycles (RSS)",
            f"{loop['rss_before']:,.1f} / {loop['rss_after']:,.1f} MiB "
            f"({loop['rss_after'] - loop['rss_before']:+.1f})",
        ),
        (
            f"live Python objects before / after {loop['cycles']:,} cycles",
            f"{loop['objects_before']:,} / {loop['objects_after']:,} "
            f"({loop['objects_after'] - loop['objects_before']:+,})",
        ),
        (
            f"{load['threads']} threads under load, {load['seconds']:.0f} s",
            f"{load['cycles']:,} cycles ({load['per_second']:,.0f}/s), "
            f"{load['wrong']} wrong records, {load['errors']} errors",
        ),
        (
            f"Ctrl-C storm, {storm.get('seconds', 0):.0f} s",
            f"{storm.get('cycles', 0):,} cycles, {storm.get('interrupts', 0):,} interrupts, "
            f"{len(storm_problems)} leaks or faults found",
        ),
        (
            f"forks while another thread enters and exits guards ({forks.get('forks', 0)})",
            ", ".join(f"{n} {what}" for what, n in sorted(fork_outcomes.items()))
            or "; ".join(forks.get("problems", [])),
        ),
        (
            "left armed after each part",
            "nothing" if not (loop["left"] or load["left"]) else "SOMETHING (see --json)",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    value = max(len(r[1]) for r in rows)
    lines = [
        heading(facts),
        "",
        f"| {'load':<{width}} | {'result':<{value}} |",
        f"|{'-' * (width + 2)}|{'-' * (value + 2)}|",
    ]
    lines += [f"| {name:<{width}} | {result:<{value}} |" for name, result in rows]
    for problem in storm_problems[:5]:
        lines.append(f"storm: {problem}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, for CI")
    parser.add_argument("--cycles", type=int, help="enter/exit cycles (100,000)")
    parser.add_argument("--threads", type=int, default=16, help="threads under load (16)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    count = args.cycles or (5_000 if quick else 100_000)
    thread_count = 4 if quick else args.threads
    wp.init()
    results = {
        "cycles": cycles(count),
        "threads": threads(thread_count, 1.0 if quick else 5.0),
        "storm": child("storm.py", "--seconds", 2 if quick else 10, timeout=120),
        "forks": child("forks.py", "race", "--forks", 10 if quick else 40, timeout=300),
    }
    facts = machine()
    print(table(results, facts))
    if args.json:
        document = {"machine": facts, "quick": quick, "results": results}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    if found_wrong(results):
        sys.exit("stress: something was left armed, recorded wrongly or leaked (see above)")


def found_wrong(results: dict) -> bool:
    """Whether any part left something armed, recorded wrongly, failed or leaked."""
    loop, load, storm, forks = (results[k] for k in ("cycles", "threads", "storm", "forks"))
    return bool(
        loop["left"]
        or load["left"]
        or load["wrong"]
        or load["errors"]
        or storm.get("problems")
        or forks.get("problems")
        or loop["objects_after"] > loop["objects_before"]
    )


if __name__ == "__main__":
    main()
