"""What the command line costs on real programs: example programs warp-lang ships, run on
the CPU plainly and under ``python -m trackgen_contract.trace``, side by side.

    python benchmarks/examples.py            # 7 rounds of each
    python benchmarks/examples.py --quick    # 1 round (CI's smoke run)

Each program first runs once plainly so that its kernels are compiled and cached; then,
each round, it runs plainly and traced in alternating order. The table shows the median
wall time and CPU time (user + system, of the child) of each, and the median of the
rounds' ratios: a round's two runs follow each other within seconds, so a change in the
machine's speed between rounds (a shared or throttled CPU can change speed by half or
more from one minute to the next) moves both runs of a round, not their ratio. A traced
run must behave as the plain one: its exit status is compared (the report goes to stderr
and adds an exit status of its own for breaches, which the table shows).

This package's modules are byte-compiled first, as pip does when it installs a package
(Warp's come so): an editable install under ``PYTHONDONTWRITEBYTECODE`` would otherwise
compile them from source in every traced run, a cost no installed copy pays.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from machine import heading, machine

# (module, arguments): small sizes, no window, no files written.
PROGRAMS = [
    ("warp.examples.core.example_wave", ["--stage-path", "None", "--num-frames", "100"]),
    ("warp.examples.core.example_fluid", ["--headless", "--num-frames", "100"]),
    ("warp.examples.core.example_sph", ["--stage-path", "None", "--num-frames", "10"]),
    ("warp.examples.fem.example_diffusion", ["--headless", "--resolution", "20"]),
    ("warp.examples.fem.example_convection_diffusion", ["--headless", "--num-frames", "20"]),
]
TRACE = [sys.executable, "-m", "trackgen_contract.trace"]


@dataclass
class Run:
    wall: float
    cpu: float
    status: int


def _run(argv: list[str]) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, done.returncode)


def compile_package() -> None:
    """Byte-compile this package's modules where they are imported from."""
    spec = importlib.util.find_spec("trackgen_contract")
    if spec is None or spec.origin is None:
        raise SystemExit("trackgen_contract is not installed: pip install -e . first")
    compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def measure(module: str, args: list[str], rounds: int) -> dict[str, object]:
    plain_argv = [sys.executable, "-m", module, "--device", "cpu", *args]
    traced_argv = [*TRACE, "-m", module, "--device", "cpu", *args]
    warm = _run(plain_argv)  # compiles and caches the kernels
    plain, traced = [], []
    for r in range(rounds):
        for name in ("plain", "traced") if r % 2 == 0 else ("traced", "plain"):
            if name == "plain":
                plain.append(_run(plain_argv))
            else:
                traced.append(_run(traced_argv))
    rounds_run = list(zip(plain, traced, strict=True))
    return {
        "program": module.removeprefix("warp.examples."),
        "plain status": warm.status,
        "traced status": traced[-1].status,
        "plain wall": statistics.median(r.wall for r in plain),
        "traced wall": statistics.median(r.wall for r in traced),
        "plain cpu": statistics.median(r.cpu for r in plain),
        "traced cpu": statistics.median(r.cpu for r in traced),
        "wall ratio": statistics.median(t.wall / p.wall for p, t in rounds_run),
        "cpu ratio": statistics.median(t.cpu / p.cpu for p, t in rounds_run),
    }


def table(rows: list[dict[str, object]]) -> str:
    width = max(len(str(r["program"])) for r in rows)
    lines = [
        heading(machine()),
        "",
        f"| {'program':<{width}} | plain wall | traced wall | wall ratio | cpu ratio "
        "| exit status plain / traced |",
        f"|{'-' * (width + 2)}|-----------:|------------:|-----------:|----------:"
        "|---------------------------:|",
    ]
    for r in rows:
        wall, cpu = r["wall ratio"], r["cpu ratio"]
        status = f"{r['plain status']} / {r['traced status']}"
        lines.append(
            f"| {r['program']:<{width}} | {r['plain wall']:>9.2f}s | {r['traced wall']:>10.2f}s "
            f"| {wall:>9.3f}x | {cpu:>8.3f}x | {status:>26} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, the first program")
    args = parser.parse_args(argv)
    programs = PROGRAMS[:1] if args.quick else PROGRAMS
    rounds = 1 if args.quick else 7
    compile_package()
    print(table([measure(module, extra, rounds) for module, extra in programs]))


if __name__ == "__main__":
    main()
