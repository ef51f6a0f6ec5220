"""What every benchmark table is headed with: the interpreter, backend, Warp and machine."""

from __future__ import annotations

import os
import platform

import warp as wp

from trackgen_contract import BACKEND
from trackgen_contract.tracer import COMPILED


def machine() -> dict[str, object]:
    """The facts a table's numbers depend on, as its JSON records them."""
    return {
        "python": platform.python_version(),
        "backend": BACKEND,
        "compiled": COMPILED,
        "warp": wp.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }


def heading(facts: dict[str, object]) -> str:
    """One line naming the facts, above a table."""
    return (
        f"Python {facts['python']} ({facts['backend']}"
        f"{', compiled' if facts.get('compiled') else ''}), warp-lang {facts['warp']}, "
        f"{facts['cpus']} CPUs, {facts['platform']}"
    )
