"""Find what would break a CUDA graph capture in NVIDIA Warp code, on any machine.

A guard watches every call into Warp while a block runs and reports host syncs,
allocations, launches and copies without ``stream=``, and nested graph captures, naming the
user's line. It never rebinds a Warp attribute: calls are seen through a ``sys.monitoring``
tool (Python >= 3.12) or ``sys.setprofile`` (3.11).

    from trackgen_contract import hot_path_guard

    with hot_path_guard():
        generator.generate()   # raises HotPathViolation at the first breach
"""

from . import startpath

startpath.set_aside()  # before anything else is imported: see there

from . import sanction
from .guard import (
    HotPathGuard,
    HotPathViolation,
    hot_path_guard,
    no_allocation,
    no_host_sync,
    stream_explicit,
)
from .hotpaths import hot_path
from .rules import CATEGORIES, Violation
from .sites import Site
from .tracer import BACKEND, Tracer, WarpCall

__version__ = "0.1.0"

__all__ = [
    "BACKEND",
    "CATEGORIES",
    "HotPathGuard",
    "HotPathViolation",
    "Site",
    "Tracer",
    "Violation",
    "WarpCall",
    "hot_path",
    "hot_path_guard",
    "no_allocation",
    "no_host_sync",
    "sanction",
    "stream_explicit",
]
