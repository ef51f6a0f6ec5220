"""The instructions of a code object, read straight from its bytes.

`dis.get_instructions` builds, for every instruction, its source positions, line
starts, jump labels and a printable argument: most of the time of the call-site analysis
of a large function, and none of it read by the model. `instructions` decodes only what
the model reads (offset, opcode, name, argument, and the argument's value where the model
or the control-flow graph uses it), the way `dis` does on Python 3.11 to 3.15, four to
seven times faster. The suite holds the two equal on Warp's modules, a dozen standard ones
and a corpus of rare shapes (they were also found equal on every code object of the
standard library). On another Python it is `dis` itself.
"""

from __future__ import annotations

import dis
import sys
from types import CodeType
from typing import NamedTuple

PY = sys.version_info[:2]


class Instruction(NamedTuple):
    """One instruction: the fields of `dis.Instruction` that the model reads. `argval` is
    set for the opcodes in `RESOLVED` (names, constants, jump targets), else None."""

    opname: str
    opcode: int
    arg: int | None
    argval: object
    offset: int


_CACHE = dis.opmap["CACHE"]
_EXTENDED_ARG = dis.EXTENDED_ARG
_INT_OVERFLOW = 2**31  # where an argument, a signed 32-bit int, wraps
JUMPS = frozenset(getattr(dis, "hasjump", ())) | frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
# 3.11 gives an argument to the opcodes from HAVE_ARGUMENT on; 3.12+ list them in hasarg.
_HAS_ARG = frozenset(getattr(dis, "hasarg", range(dis.HAVE_ARGUMENT, 256)))

# The opcodes whose argument value the model reads, by how it is found: an index into
# co_names (shifted right by the bits that carry flags), a local or cell (a pair of them,
# four bits each), a constant, the small int itself.
_NAME_SHIFTS = {
    "LOAD_GLOBAL": 1, "LOAD_ATTR": 1 if PY >= (3, 12) else 0, "LOAD_NAME": 0, "LOAD_METHOD": 0,
    "STORE_NAME": 0, "DELETE_NAME": 0, "STORE_GLOBAL": 0, "DELETE_GLOBAL": 0,
}  # fmt: skip
_LOCALS = (
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_BORROW", "LOAD_DEREF",
    "LOAD_CLASSDEREF", "STORE_FAST", "STORE_DEREF", "DELETE_FAST", "DELETE_DEREF",
)  # fmt: skip
_LOCAL_PAIRS = (
    "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "STORE_FAST_LOAD_FAST",
    "STORE_FAST_STORE_FAST",
)  # fmt: skip


def _kinds() -> dict[int, tuple[str, int]]:
    """opcode -> (how its argument value is found, the bits to shift its argument by)."""
    kinds: dict[str, tuple[str, int]] = {"LOAD_CONST": ("const", 0), "LOAD_SMALL_INT": ("int", 0)}
    kinds.update((name, ("name", shift)) for name, shift in _NAME_SHIFTS.items())
    kinds.update((name, ("local", 0)) for name in _LOCALS)
    kinds.update((name, ("local pair", 0)) for name in _LOCAL_PAIRS)
    found = {dis.opmap[name]: kind for name, kind in kinds.items() if name in dis.opmap}
    for op in JUMPS:
        found[op] = ("absolute jump" if op in dis.hasjabs else "relative jump", 0)
    return found


_KIND = _kinds()
#: The opcodes whose `Instruction.argval` is set (the others' is None).
RESOLVED = frozenset(_KIND)
_BACKWARD = frozenset(
    op
    for op in JUMPS
    if "JUMP_BACKWARD" in dis.opname[op] or (PY >= (3, 14) and dis.opname[op] == "END_ASYNC_FOR")
)


def instructions(code: CodeType) -> list[Instruction]:
    """The instructions of `code`, in order, without their inline caches."""
    if not (3, 11) <= PY <= (3, 15):
        return [
            Instruction(i.opname, i.opcode, i.arg, i.argval, i.offset)
            for i in dis.get_instructions(code)
        ]
    raw = code.co_code
    consts, names, local = code.co_consts, code.co_names, code._varname_from_oparg  # type: ignore[attr-defined]
    opname, kind_of = dis.opname, _KIND.get
    found: list[Instruction] = []
    extended = 0
    size = len(raw)
    for offset in range(0, size, 2):
        op = raw[offset]
        if op == _CACHE:
            continue
        arg = None
        if op in _HAS_ARG:
            arg = raw[offset + 1] | extended
            extended = (arg << 8) if op == _EXTENDED_ARG else 0
            if extended >= _INT_OVERFLOW:  # a C int: four prefixes can make it negative
                extended -= 2 * _INT_OVERFLOW
        else:
            extended = 0
        argval = None
        kind = kind_of(op)
        if kind is not None:
            argval = _value(kind, arg, offset, raw, consts, names, local)  # type: ignore[arg-type]
        found.append(Instruction(opname[op], op, arg, argval, offset))
    return found


def _value(
    kind: tuple[str, int],
    arg: int,
    offset: int,
    raw: bytes,
    consts: tuple,
    names: tuple,
    local: object,
) -> object:
    how, shift = kind
    if how == "name":
        return names[arg >> shift]
    if how == "local":
        return local(arg)  # type: ignore[operator]
    if how == "const":
        return consts[arg]
    if how == "local pair":
        return local(arg >> 4), local(arg & 15)  # type: ignore[operator]
    if how == "int":
        return arg
    if how == "absolute jump":
        return arg * 2
    # Relative to the end of the instruction's inline caches (zeroed CACHE units in
    # co_code: 3.11's jumps have none); backward for the JUMP_BACKWARD family and 3.14's
    # END_ASYNC_FOR, whose target lies behind it.
    end = offset + 2
    while end < len(raw) and raw[end] == _CACHE:
        end += 2
    return end + 2 * (-arg if raw[offset] in _BACKWARD else arg)
