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

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Each public name's module, imported at the name's first use. The pytest plugin is loaded
# into every pytest run of an environment that has this package: a suite that guards
# nothing does not pay for the tracer, the rules and the call-site decoder.
_HOMES = {
    "BACKEND": "tracer",
    "CATEGORIES": "rules",
    "HotPathGuard": "guard",
    "HotPathViolation": "guard",
    "Site": "sites",
    "Tracer": "tracer",
    "Violation": "rules",
    "WarpCall": "tracer",
    "hot_path": "hotpaths",
    "hot_path_guard": "guard",
    "no_allocation": "guard",
    "no_host_sync": "guard",
    "sanction": "sanction",  # the module itself
    "stream_explicit": "guard",
}

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


def __getattr__(name: str) -> object:
    """A public name, or a submodule (``trackgen_contract.tracer``), imported now."""
    home = _HOMES.get(name)
    if home is not None:
        module = import_module(f"{__name__}.{home}")
        value = module if home == name else getattr(module, name)
    elif name.isidentifier() and not name.startswith("__") and find_spec(f"{__name__}.{name}"):
        value = import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
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
