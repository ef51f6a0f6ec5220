"""What the stack model knows about a value on the caller's stack.

Each description says how the value can be read again from the caller's frame after the
call started (`Ref`, `Method`, `Const`, or `OneOf` several of them, by the path taken),
how an argument list or keyword dict was put together (`Args`, `Kwargs`, `Star`, `Name`),
or that it is the result of another call (`Result`). `UNKNOWN` is anything else.
Descriptions are immutable and compare by value: two paths that reach one instruction with
equal descriptions keep them, readable ones that differ become `OneOf` them, the others
`UNKNOWN`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..handlers import raised_by_handler


class Token:
    """A named singleton description."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN = Token("UNKNOWN")  # a value the model cannot describe
NULL = Token("NULL")  # the NULL the compiler pushes beside a callable or for "no **kwargs"


@dataclass(frozen=True)
class Const:
    """A constant of the code object (its type is part of it: ``1`` is not ``True``)."""

    value: object
    kind: type

    @classmethod
    def of(cls, value: object) -> Const:
        return cls(value, type(value))


@dataclass(frozen=True)
class Ref:
    """A value read from a name, then through attributes and items.

    `scope` is ``"fast"`` (a local or a cell), ``"global"`` (globals, then builtins) or
    ``"name"`` (a module or class body: its locals, then globals, then builtins). A step
    is ``("attr", name)`` or ``("item", key)``, the key itself a `Const` or a `Ref`.
    """

    scope: str
    name: str
    steps: tuple[tuple[str, object], ...] = ()

    def then(self, kind: str, key: object) -> Ref:
        return Ref(self.scope, self.name, (*self.steps, (kind, key)))


@dataclass(frozen=True)
class Method:
    """``receiver.name`` loaded to be called (the receiver may end up bound as ``self``)."""

    receiver: object
    name: str


@dataclass(frozen=True)
class OneOf:
    """One of a few readable descriptions, by the path that reached the instruction
    (``(wp.launch if c else launch)(...)``): read back exactly where every one of them
    gives the same answer, whichever path was taken."""

    options: frozenset[object]


_MAX_OPTIONS = 4  # more paths than that: UNKNOWN (it also bounds the analysis' joins)


def options(value: object) -> frozenset[object]:
    """The alternatives `value` stands for: a `OneOf`'s options, each of a `Method` on a
    `OneOf` receiver, or `value` itself."""
    if type(value) is OneOf:
        return value.options  # type: ignore[attr-defined]
    if type(value) is Method and type(value.receiver) is OneOf:  # type: ignore[attr-defined]
        return frozenset(Method(r, value.name) for r in value.receiver.options)  # type: ignore[attr-defined]
    return frozenset((value,))


@dataclass(frozen=True)
class Star:
    """A starred part of an argument list: ``*value`` in `Args`, ``**value`` in `Kwargs`."""

    value: object


@dataclass(frozen=True)
class Name:
    """A keyword name in a dict display, read back from a variable: ``**{key: value}``."""

    value: object


@dataclass(frozen=True)
class Args:
    """A positional argument list being built: values and `Star` parts, in order."""

    items: tuple[object, ...]


@dataclass(frozen=True)
class Kwargs:
    """A keyword dict being built: literal names (str), names read back (`Name`) and `Star`
    (``**``) parts."""

    items: tuple[object, ...]


@dataclass(frozen=True)
class CallShape:
    """How one call instruction got its callable and its arguments.

    `args` is an `Args`, or a description of the ``*args`` value for a
    ``CALL_FUNCTION_EX`` that passes one sequence as is; `kwargs` likewise. `UNKNOWN`
    where the model lost track.
    """

    func: object
    args: object
    kwargs: object

    @property
    def static(self) -> bool:
        """Whether every argument is spelled out (no ``*`` or ``**`` part)."""
        return (
            type(self.args) is Args
            and not any(type(item) is Star for item in self.args.items)
            and type(self.kwargs) is Kwargs
            and all(type(item) is str for item in self.kwargs.items)
        )


@dataclass(frozen=True)
class Result:
    """The value a call returned (a callable made inline: ``partial(f, ...)(...)``)."""

    shape: CallShape


def join(a: object, b: object) -> object:
    """What two paths agree on about one value: equal parts stay, readable values that
    differ become `OneOf` them, the rest is UNKNOWN.

    Structural, so a list whose one item differs keeps its length and its other items:
    ``[k, 8, a]`` and ``[k, 8, UNKNOWN]`` join to ``[k, 8, UNKNOWN]``."""
    if a == b:
        return a
    kind = type(a)
    if kind is not type(b):
        return _either(a, b)
    if kind in (Args, Kwargs) and len(a.items) == len(b.items):  # type: ignore[attr-defined]
        pair = join if kind is Args else _join_keyword
        items = tuple(pair(x, y) for x, y in zip(a.items, b.items, strict=True))  # type: ignore[attr-defined]
        return UNKNOWN if any(i is _CONFLICT for i in items) else kind(items)
    if kind is Star:
        return Star(join(a.value, b.value))  # type: ignore[attr-defined]
    if kind is Method and a.name == b.name:  # type: ignore[attr-defined]
        return Method(join(a.receiver, b.receiver), a.name)  # type: ignore[attr-defined]
    if kind is Result:
        sa, sb = a.shape, b.shape  # type: ignore[attr-defined]
        return Result(
            CallShape(join(sa.func, sb.func), join(sa.args, sb.args), join(sa.kwargs, sb.kwargs))
        )
    return _either(a, b)


_READABLE = frozenset({Ref, Method, Const, OneOf})


def _either(a: object, b: object) -> object:
    if type(a) not in _READABLE or type(b) not in _READABLE:
        return UNKNOWN
    try:
        either = options(a) | options(b)
    except TypeError as error:  # an unhashable constant (a code object rebuilt with a list)
        if raised_by_handler(error):
            raise
        return UNKNOWN
    return OneOf(either) if len(either) <= _MAX_OPTIONS else UNKNOWN


_CONFLICT = Token("CONFLICT")  # two keyword names that differ: the dict itself is unknown


def _join_keyword(x: object, y: object) -> object:
    if type(x) is Star and type(y) is Star:
        return join(x, y)
    return x if x == y else _CONFLICT  # keyword names, spelled or read: equal or nothing


def reads(value: object, names: frozenset[str]) -> bool:
    """Whether reading `value` back would read one of the variables `names`."""
    kind = type(value)
    if kind is Ref:
        return value.name in names or any(  # type: ignore[attr-defined]
            reads(key, names)
            for _, key in value.steps  # type: ignore[attr-defined]
        )
    if kind is Method:
        return reads(value.receiver, names)  # type: ignore[attr-defined]
    if kind in (Star, Name):
        return reads(value.value, names)  # type: ignore[attr-defined]
    if kind is OneOf:
        return any(reads(option, names) for option in value.options)  # type: ignore[attr-defined]
    if kind in (Args, Kwargs):
        return any(reads(item, names) for item in value.items)  # type: ignore[attr-defined]
    if kind is Result:
        shape = value.shape  # type: ignore[attr-defined]
        return any(reads(part, names) for part in (shape.func, shape.args, shape.kwargs))
    return False
