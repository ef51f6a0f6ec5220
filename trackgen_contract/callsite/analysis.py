"""The call sites of one code object, found by an abstract interpretation of its bytecode.

The stack model (`model.step`) runs over the control-flow graph until nothing changes:
the stack at an instruction that several paths reach is the slot-by-slot join of theirs
(equal descriptions stay, others become `UNKNOWN`). An exception handler starts with the
depth the exception table gives it, every value unknown. So a branch in one argument
(``inputs=[a] if c else [b]``) or a comprehension costs that argument only; the keyword
names and the ``**kw`` reference of the call survive.

Every call instruction is described by a `CallSite` for each place the caller's
``f_lasti`` can rest on while the callee runs: on 3.11 and 3.12 a Python-to-Python call
leaves it on the call's last inline cache entry and a call made through C code
(``functools.partial``, ``map``, a class) on the call itself; from 3.13 on it is always
the call itself, and `direct` is None: the two cannot be told apart from the offset.
"""

from __future__ import annotations

import dis
import heapq
from types import CodeType

from . import bytecode, model
from .bytecode import Instruction
from .values import UNKNOWN, CallShape, join

_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})

Entry = tuple[tuple[object, ...], tuple | None]  # (stack, pending KW_NAMES)


class CallSite:
    """A call instruction, seen from one offset where the caller's ``f_lasti`` rests.

    `direct` is True for a Python-to-Python call, False for a call through C code, None
    where the offset cannot tell (3.13+). `verdicts` caches, per callee code object, the
    explicit names of a call whose answer depends on nothing but the callable (see
    `decision`).
    """

    __slots__ = ("direct", "offset", "shape", "static", "verdicts")

    def __init__(self, shape: CallShape, offset: int, direct: bool | None) -> None:
        self.shape = shape
        self.offset = offset  # the call instruction's own offset
        self.direct = direct
        self.static = shape.static
        self.verdicts: dict[int, object] = {}

    def __repr__(self) -> str:
        return f"<CallSite @{self.offset} direct={self.direct} {self.shape}>"


def _join(old: Entry | None, new: Entry) -> Entry:
    if old is None:
        return new
    (a, names_a), (b, names_b) = old, new
    if len(a) != len(b):  # not valid bytecode for CPython; stay safe all the same
        depth = max(len(a), len(b))
        return (UNKNOWN,) * depth, None
    stack = tuple(join(x, y) for x, y in zip(a, b, strict=True))
    return stack, names_a if names_a == names_b else None


def _handlers(code: CodeType) -> dict[int, tuple[int, int, int]]:
    """For each protected offset: (its handler, the stack depth kept, lasti pushed)."""
    covered: dict[int, tuple[int, int, int]] = {}
    for handler in dis.Bytecode(code).exception_entries:
        for offset in range(handler.start, handler.end, 2):
            covered.setdefault(offset, (handler.target, handler.depth, int(handler.lasti)))
    return covered


def _on_exception(stack: tuple[object, ...], depth: int, lasti: int) -> Entry:
    # The handler keeps the stack's first `depth` values as they were (the compiler
    # guarantees nothing in the protected range touches them), then lasti and the exception.
    kept = stack[:depth] + (UNKNOWN,) * (depth - len(stack))
    return kept + (UNKNOWN,) * (lasti + 1), None


def _successors(ins: Instruction, following: int | None) -> list[tuple[int, bool]]:
    """(offset, along the jump) of each instruction that can run after `ins`."""
    found = []
    if ins.opcode in bytecode.JUMPS and ins.argval is not None:
        found.append((ins.argval, True))
    if ins.opname not in model.TERMINATORS and following is not None:
        found.append((following, False))
    return found


def _outcomes(
    ins: Instruction,
    following: int | None,
    stack: tuple[object, ...],
    names: tuple | None,
    code: CodeType,
    handler: tuple[int, int, int] | None,
) -> list[tuple[int, Entry]]:
    """The state each successor of `ins` gets: along its jump, past it, into its handler."""
    found = []
    for target, jump in _successors(ins, following):
        out = list(stack)
        state = {} if names is None else {"kwnames": names}
        model.step(out, ins, code, state, jump=jump)
        found.append((target, (tuple(out), state.get("kwnames"))))
    if handler is not None:
        target, depth, lasti = handler
        found.append((target, _on_exception(stack, depth, lasti)))
    return found


def _fixpoint(code: CodeType, instructions: list[Instruction]) -> dict[int, Entry]:
    """The stack on entry to each reachable instruction, by offset."""
    index = {ins.offset: i for i, ins in enumerate(instructions)}
    handlers = _handlers(code)
    entries: dict[int, Entry] = {instructions[0].offset: ((), None)}
    # Lowest offset first: in structured code every path into a merge point is usually
    # there before it is visited, so few values are joined with a partial state.
    work = list(entries)
    heapq.heapify(work)
    queued = set(work)
    while work:
        offset = heapq.heappop(work)
        queued.discard(offset)
        i = index[offset]
        ins = instructions[i]
        following = instructions[i + 1].offset if i + 1 < len(instructions) else None
        stack, names = entries[offset]
        for target, new in _outcomes(ins, following, stack, names, code, handlers.get(offset)):
            joined = _join(entries.get(target), new)
            if joined != entries.get(target) and target in index:
                entries[target] = joined
                if target not in queued:
                    queued.add(target)
                    heapq.heappush(work, target)
    return entries


def analyse(code: CodeType) -> dict[int, CallSite]:
    """Every call site of `code`, keyed by each offset ``f_lasti`` can rest on during it."""
    instructions = bytecode.instructions(code)
    if not instructions:
        return {}
    entries = _fixpoint(code, instructions)
    sites: dict[int, CallSite] = {}
    for i, ins in enumerate(instructions):
        if ins.opname not in _CALLS or ins.offset not in entries:
            continue
        stack, names = entries[ins.offset]
        state = {} if names is None else {"kwnames": names}
        shape = model.step(list(stack), ins, code, state)
        if shape is None:
            continue
        if model.PY >= (3, 13) or ins.opname == "CALL_FUNCTION_EX":
            # CALL_FUNCTION_EX has no inline cache: where lasti rests says nothing.
            sites[ins.offset] = CallSite(shape, ins.offset, None)
            continue
        sites[ins.offset] = CallSite(shape, ins.offset, False)
        end = instructions[i + 1].offset if i + 1 < len(instructions) else ins.offset
        direct = CallSite(shape, ins.offset, True)
        for cache in range(ins.offset + 2, end, 2):
            sites[cache] = direct
    return sites
