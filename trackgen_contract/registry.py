"""What to watch: one declarative table of the Warp entry points the contract is about.

Each row names a public Warp API, its kind of operation, how to reach its code object from
the public ``warp`` package, the Warp versions that have it, and the roles of its
parameters (which one carries the stream, which arrays' devices matter). The table is
resolved against the installed Warp on first use. A row that the installed version should
have but that cannot be found is an error naming it and the version: a watched API that
silently went missing would be a hole in the contract.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import CodeType, FrameType

#: Oldest warp-lang this registry knows the layout of.
OLDEST_WARP = (1, 6)

# Kinds of operation (`Entry.op`). What each means for the contract lives in `rules`.
SYNC = "sync"  # blocks the host on device work
READBACK = "readback"  # copies device data into host memory for Python
COPY = "copy"  # wp.copy: a stream operation, and a host sync between devices
LAUNCH = "launch"  # a kernel launch
MEMSET = "memset"  # fills or copies on Warp's current stream, no stream parameter
SCOPED_STREAM = "scoped_stream"  # switches Warp's current stream
CAPTURE = "capture"  # opens, ends or launches a graph
ALLOC = "alloc"  # Warp's array allocation chokepoint
ALLOCATOR = "allocator"  # a raw device allocator, reached directly by fabric/fem
NATIVE = "native"  # creates a native Warp object (hash grid, mesh, volume, ...)

OPS = (SYNC, READBACK, COPY, LAUNCH, MEMSET, SCOPED_STREAM, CAPTURE, ALLOC, ALLOCATOR, NATIVE)

Version = tuple[int, ...]


class RegistryError(LookupError):
    """A watched Warp API could not be resolved in the installed Warp."""


@dataclass(frozen=True)
class Watch:
    """One row of the table: a Warp API to watch and the roles of its parameters.

    ``path`` starts at a root (``wp``: the ``warp`` package; ``ctx``: the module that
    defines ``wp.launch``, ``warp.context`` or ``warp._src.context``; ``det``:
    ``warp._src.deterministic``) and follows attributes. ``/`` steps into a function's
    nested code (a class that Warp builds lazily inside a factory function).
    """

    api: str
    op: str
    path: str
    since: Version | None = None
    until: Version | None = None  # first version without it
    stream: str | None = None  # the parameter carrying the stream
    devices: tuple[str, ...] = ()  # array parameters whose devices must agree
    positional: tuple[str, ...] = ()  # names of the positions of a ``*args`` signature
    data: str | None = None  # the parameter whose None means "nothing is created"
    parens: bool = True  # spelled as a call in messages ("wp.copy()", not "wp.ScopedStream")
    # Paths of Warp code that finishes the same user construct (``ScopedCapture.__exit__``):
    # watched calls made inside it belong to the construct, already judged on entry.
    serves: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The API as messages spell it: ``wp.synchronize()``, ``wp.ScopedStream``."""
        return f"{self.api}()" if self.parens else self.api

    def applies_to(self, version: Version) -> bool:
        """Whether the Warp `version` has this API by design."""
        if self.since is not None and version < self.since:
            return False
        return not (self.until is not None and version >= self.until)


_LAUNCH_PARAMS = (
    "kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream",
)  # fmt: skip
_ALLOCATORS = ("CpuDefaultAllocator", "CpuPinnedAllocator", "CudaDefaultAllocator",
               "CudaMempoolAllocator")  # fmt: skip


def _table() -> list[Watch]:
    rows = [
        *(Watch(f"wp.{n}", SYNC, f"wp.{n}") for n in
          ("synchronize", "synchronize_device", "synchronize_stream", "synchronize_event")),
        *(Watch(f"wp.array.{m}", READBACK, f"wp.{cls}.{m}")
          for m in ("numpy", "list") for cls in ("array", "indexedarray")),
        Watch("wp.array.__array_interface__", READBACK, "wp.array.__array_interface__",
              parens=False),
        Watch("wp.copy", COPY, "wp.copy", stream="stream", devices=("dest", "src")),
        Watch("wp.launch", LAUNCH, "wp.launch", stream="stream"),
        Watch("wp.launch_tiled", LAUNCH, "wp.launch_tiled", stream="stream",
              positional=_LAUNCH_PARAMS),
        Watch("wp.Launch.launch", LAUNCH, "wp.Launch.launch", stream="stream"),
        Watch("wp.DeterministicLaunch.launch", LAUNCH,
              "det._deterministic_launch_class/DeterministicLaunch.launch",
              since=(1, 15), stream="stream"),
        *(Watch(f"wp.array.{m}", MEMSET, f"wp.{cls}.{m}")
          for m in ("assign", "zero_", "fill_") for cls in ("array", "indexedarray")),
        Watch("wp.ScopedStream", SCOPED_STREAM, "wp.ScopedStream.__enter__", parens=False),
        Watch("wp.ScopedCapture", CAPTURE, "wp.ScopedCapture.__enter__", parens=False,
              serves=("wp.ScopedCapture.__exit__",)),
        *(Watch(f"wp.{n}", CAPTURE, f"wp.{n}")
          for n in ("capture_begin", "capture_end", "capture_launch")),
        *(Watch(f"wp.{n}", CAPTURE, f"wp.{n}", since=(1, 8))
          for n in ("capture_if", "capture_while")),
        # Not exported by Warp, but capture controls all the same.
        *(Watch(f"wp.{n}", CAPTURE, f"ctx.{n}", since=(1, 8))
          for n in ("capture_pause", "capture_resume")),
        Watch("wp.array._init_new", ALLOC, "wp.array._init_new"),
        *(Watch(f"wp.{c}.alloc", ALLOCATOR, f"ctx.{c}.alloc", until=(1, 13)) for c in _ALLOCATORS),
        *(Watch(f"wp.{c}.allocate", ALLOCATOR, f"ctx.{c}.allocate", since=(1, 13))
          for c in _ALLOCATORS),
        Watch("wp.CudaManagedAllocator.allocate", ALLOCATOR, "ctx.CudaManagedAllocator.allocate",
              since=(1, 15)),
        Watch("wp.HashGrid", NATIVE, "wp.HashGrid.__init__"),
        Watch("wp.HashGrid.reserve", NATIVE, "wp.HashGrid.reserve"),
        Watch("wp.Mesh", NATIVE, "wp.Mesh.__init__"),
        Watch("wp.Bvh", NATIVE, "wp.Bvh.__init__"),
        Watch("wp.Volume", NATIVE, "wp.Volume.__init__", data="data"),
        *(Watch(f"wp.Volume.{m}", NATIVE, f"wp.Volume.{m}") for m in (
            "allocate", "allocate_by_tiles", "allocate_by_voxels", "load_from_nvdb",
            "load_from_address", "load_from_numpy", "load_next_grid")),
        Watch("wp.Volume.rebuild", NATIVE, "wp.Volume.rebuild", since=(1, 16)),
        *(Watch(f"wp.{c}", NATIVE, f"wp.{c}.__init__", since=(1, 12))
          for c in ("Texture", "Texture1D", "Texture2D", "Texture3D")),
        Watch("wp.MarchingCubes", NATIVE, "wp.MarchingCubes.__init__", until=(1, 9)),
    ]  # fmt: skip
    return rows


TABLE: tuple[Watch, ...] = tuple(_table())


@dataclass(frozen=True)
class Entry:
    """A watched API resolved in the installed Warp: the row and its code object.

    `api`, `op` and `parameters` are copied out of the row once: tracers read them on
    every watched call.
    """

    watch: Watch
    code: CodeType = field(repr=False)
    api: str = field(init=False)
    op: str = field(init=False)
    #: Names of the positional parameters in order (``self`` included; for a ``*args``
    #: signature, the names its positions stand for).
    parameters: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        code = self.code
        names = code.co_varnames[: code.co_argcount]
        if code.co_flags & _CO_VARARGS and self.watch.positional:
            names += self.watch.positional
        object.__setattr__(self, "api", self.watch.api)
        object.__setattr__(self, "op", self.watch.op)
        object.__setattr__(self, "parameters", names)


_CO_VARARGS = 0x04


def parse_version(text: str) -> Version:
    """``"1.10.1"`` -> ``(1, 10, 1)``; a suffix such as ``.dev0`` or ``rc1`` is ignored."""
    parts = []
    for piece in text.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise RegistryError(f"cannot read the warp-lang version {text!r}")
    return tuple(parts)


def _roots(wp: types.ModuleType) -> dict[str, object]:
    roots: dict[str, object] = {"wp": wp, "ctx": sys.modules[wp.launch.__module__]}
    # Only rows marked `since` a version that has this module refer to it.
    with contextlib.suppress(ImportError):
        roots["det"] = importlib.import_module("warp._src.deterministic")
    return roots


def _code_of(obj: object) -> CodeType:
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)  # classmethod, staticmethod, bound method
    code = getattr(obj, "__code__", None)
    if not isinstance(code, CodeType):
        raise TypeError(f"{obj!r} is not a Python function")
    return code


def _nested_code(code: CodeType, qualname_tail: str) -> CodeType:
    stack = [code]
    while stack:
        current = stack.pop()
        if current.co_qualname.endswith(qualname_tail) and current is not code:
            return current
        stack.extend(c for c in current.co_consts if isinstance(c, CodeType))
    raise AttributeError(f"no nested code {qualname_tail!r} in {code.co_qualname}")


def _resolve_path(path: str, roots: dict[str, object]) -> CodeType:
    head, _, nested = path.partition("/")
    root, *attrs = head.split(".")
    obj = roots[root]
    for name in attrs:
        obj = getattr(obj, name)
    code = _code_of(obj)
    return _nested_code(code, nested) if nested else code


_installed: Registry | None = None


def installed() -> Registry:
    """The registry of the installed Warp, resolved on first use."""
    global _installed
    if _installed is None:
        _installed = resolve()
    return _installed


def resolve(wp: types.ModuleType | None = None) -> Registry:
    """Resolve `TABLE` against the installed (or the given) ``warp`` module."""
    if wp is None:
        import warp as wp
    version = parse_version(wp.__version__)
    if version[:2] < OLDEST_WARP:
        raise RegistryError(
            f"warp-lang {wp.__version__} is older than the oldest supported version "
            f"({'.'.join(map(str, OLDEST_WARP))})"
        )
    roots = _roots(wp)
    entries: dict[int, Entry] = {}
    serving: dict[int, tuple[CodeType, str]] = {}
    for watch in TABLE:
        if not watch.applies_to(version):
            continue
        code = _find(watch, watch.path, roots, wp.__version__)
        # Two public names can share one code object (an inherited method, a subclass
        # without its own __init__): the first row names it.
        entries.setdefault(id(code), Entry(watch, code))
        for path in watch.serves:
            served = _find(watch, path, roots, wp.__version__)
            serving[id(served)] = (served, watch.api)
    return Registry(wp.__version__, entries, wp, serving)


def _find(watch: Watch, path: str, roots: dict[str, object], version: str) -> CodeType:
    try:
        return _resolve_path(path, roots)
    except (AttributeError, KeyError, TypeError) as exc:
        raise RegistryError(
            f"cannot find {watch.api} ({path}) in warp-lang {version}, which should have it: {exc}"
        ) from None


class Registry:
    """The watched entries of one installed Warp, by code object.

    `by_id` maps ``id(code)`` to its entry: tracers look entries up on every event, and
    hashing a code object hashes its whole bytecode (microseconds for ``wp.launch``). The
    entries hold their code objects, Warp's functions, which live as long as Warp does.
    """

    def __init__(
        self,
        warp_version: str,
        entries: dict[int, Entry],
        wp: types.ModuleType,
        serving: dict[int, tuple[CodeType, str]] | None = None,
    ):
        self.warp_version = warp_version
        self.by_id = entries
        self._wp = wp
        self._serving = serving or {}
        self._public: _PublicNames | None = None

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def entry(self, code: CodeType) -> Entry | None:
        """The entry watching `code`, if any."""
        return self.by_id.get(id(code))

    def served_api(self, code: CodeType) -> str | None:
        """The watched API whose user construct `code` finishes (``"wp.ScopedCapture"``
        for ``ScopedCapture.__exit__``), if any."""
        found = self._serving.get(id(code))
        return found[1] if found is not None and found[0] is code else None

    def by_api(self, api: str) -> Entry:
        """The (first) entry of a public API name, e.g. ``"wp.copy"``."""
        for entry in self.by_id.values():
            if entry.api == api:
                return entry
        raise KeyError(f"{api!r} is not watched in warp-lang {self.warp_version}")

    def public_name(self, code: CodeType, module: str, frame: FrameType | None = None) -> str:
        """The public spelling of a Warp function: ``wp.zeros``, ``wp.array`` for
        ``array.__init__``, ``wp.fem.Trimesh3D`` for the constructor it shares with
        ``wp.fem.Trimesh2D``, running in `frame`; else its module path and qualified name
        (``wp.fem.cache.borrow_temporary``)."""
        if self._public is None:
            self._public = _PublicNames(self._wp)
        name = self._public.name(code, frame)
        if name is not None:
            return name
        module = module.replace("._src", "")
        module = "wp" + module[len("warp") :] if module.startswith("warp") else module
        return f"{module}.{code.co_qualname}"


class _PublicNames:
    """The public spelling of Warp's functions, keyed by ``id(code)`` (Warp's functions
    live as long as Warp, so the ids stay theirs), read off Warp's public modules that are
    imported: ``warp`` first, then its subpackages (``warp.fem``, ``warp.optim``...),
    shallowest first. Nothing is imported here: a subpackage the program imports later
    is read once it is there and its import is complete (looked for when ``sys.modules``
    has grown). A function that several public classes share (``Trimesh.__init__``,
    behind ``wp.fem.Trimesh2D`` and ``wp.fem.Trimesh3D``) is named by the class it runs
    for (`name`)."""

    def __init__(self, wp: types.ModuleType) -> None:
        self._wp = wp
        self._read: set[str] = set()
        self._modules = -1  # len(sys.modules) when they were last looked through
        self.names: dict[int, str] = {}
        # id(code) -> id(class) -> name, for the classes that reach one function
        self._owners: dict[int, dict[int, str]] = {}

    def name(self, code: CodeType, frame: FrameType | None) -> str | None:
        """`code`'s public name, running in `frame` (None: not known), or None."""
        if len(sys.modules) != self._modules:
            self._read_new_modules()
        owners = self._owners.get(id(code))
        if owners is not None and len(set(owners.values())) > 1 and frame is not None:
            for klass in _type_mro(_receiver_class(code, frame)):
                if id(klass) in owners:
                    return owners[id(klass)]
        return self.names.get(id(code))

    def _read_new_modules(self) -> None:
        self._modules = len(sys.modules)
        root = self._wp.__name__
        if root not in self._read:
            self._read.add(root)
            self._read_module("wp", self._wp)
        new = [n for n in list(sys.modules) if n not in self._read and _is_public(n, root)]
        for name in sorted(new, key=lambda name: (name.count("."), name)):
            module = sys.modules.get(name)
            if _being_imported(module):
                self._modules = -1  # half its names are not there yet: looked at again
                continue
            self._read.add(name)
            if isinstance(module, types.ModuleType):
                self._read_module("wp" + name[len(root) :], module)

    def _read_module(self, prefix: str, module: types.ModuleType) -> None:
        for attr, value in vars(module).items():
            if isinstance(value, type) and value.__module__.startswith("warp"):
                self._read_class(f"{prefix}.{attr}", value)
            else:
                _add(self.names, f"{prefix}.{attr}", value)

    def _read_class(self, prefix: str, cls: type) -> None:
        for klass in cls.__mro__:
            if not klass.__module__.startswith("warp"):
                continue
            for attr, value in vars(klass).items():
                constructor = attr in ("__init__", "__new__")  # wp.array2d(...) calls __new__
                name = prefix if constructor else f"{prefix}.{attr}"
                for code in _add(self.names, name, value):
                    self._owners.setdefault(id(code), {}).setdefault(id(cls), name)


def _is_public(module: str, root: str) -> bool:
    """Whether `module` is a public subpackage of Warp's (`root`, ``warp``): none of its
    parts private (``warp._src``), not its examples or tests."""
    if not module.startswith(root + "."):
        return False
    parts = module[len(root) + 1 :].split(".")
    return parts[0] not in ("examples", "tests") and not any(p.startswith("_") for p in parts)


def _being_imported(module: object) -> bool:
    """Whether `module`'s import is still running (a breach made by its own top-level
    code, say): importlib marks its spec meanwhile."""
    spec = module.__dict__.get("__spec__") if isinstance(module, types.ModuleType) else None
    return getattr(spec, "_initializing", False) is True


def _receiver_class(code: CodeType, frame: FrameType) -> type:
    """The class a method's code runs for in `frame`: its first argument's class (the
    argument itself for ``__new__``). Read off the frame: no code of the user's runs."""
    value = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
    return value if issubclass(type(value), type) else type(value)  # type: ignore[return-value]


_type_mro = type.__dict__["__mro__"].__get__


def _add(names: dict[int, str], name: str, value: object) -> list[CodeType]:
    """Name the functions of `value` `name` where they have no name yet; they are
    returned. A property's setter and deleter run at ``a.requires_grad = True``: they go
    by its name."""
    parts = (value.fget, value.fset, value.fdel) if isinstance(value, property) else (value,)
    codes = []
    for part in parts:
        try:
            code = _code_of(part)
        except TypeError:
            continue
        names.setdefault(id(code), name)
        codes.append(code)
    return codes
