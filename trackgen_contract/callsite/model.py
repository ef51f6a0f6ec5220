"""The value stack, one instruction at a time, on the running Python (3.11 to 3.15).

`step` applies one instruction to a simulated stack of `values` descriptions. The
instructions that build a call (loads of names and attributes, argument lists, keyword
dicts, the call instructions themselves) are modelled exactly. Every other instruction
pops what it pops and pushes `UNKNOWN`, so only its own results are lost: how many it pops
is in `_POPS` (or it pushes nothing, and pops what ``dis.stack_effect`` says), and how
many it pushes follows from ``dis.stack_effect``. An opcode missing from both tables (a
newer Python's) keeps the stack depth but forgets every value on it: never a guess.
"""

from __future__ import annotations

import dis
import opcode
import sys
from collections.abc import Callable
from types import CodeType

from .bytecode import Instruction
from .values import (
    NULL,
    UNKNOWN,
    Args,
    CallShape,
    Const,
    Kwargs,
    Method,
    Name,
    OneOf,
    Ref,
    Result,
    Star,
    reads,
)

PY = sys.version_info[:2]

# The subscript operation of BINARY_OP (3.14+; BINARY_SUBSCR before).
_NB_OPS = [name for name, _ in getattr(dis, "_nb_ops", ())]
_NB_SUBSCR = _NB_OPS.index("NB_SUBSCR") if "NB_SUBSCR" in _NB_OPS else None
_INTRINSIC_LIST_TO_TUPLE = 6  # CALL_INTRINSIC_1 operand (3.12+)
#: What LOAD_COMMON_CONSTANT loads, by its argument (3.14+; `dis` reads the same table).
COMMON_CONSTANTS = tuple(getattr(opcode, "_common_constants", ()))

Stack = list  # of value descriptions, bottom first


def _pop(stack: Stack) -> object:
    return stack.pop() if stack else UNKNOWN


def _popn(stack: Stack, n: int) -> list[object]:
    return [_pop(stack) for _ in range(n)][::-1]


def _peek(stack: Stack, depth: int) -> object:
    return stack[-depth] if 0 < depth <= len(stack) else UNKNOWN


def _replace(stack: Stack, depth: int, value: object) -> None:
    if 0 < depth <= len(stack):
        stack[-depth] = value


def _callable_of(first: object, second: object) -> object:
    """The callable among the two slots below a call's arguments: one holds the callable,
    the other NULL or the ``self`` a method load pushed beside a `Method`."""
    if type(first) is Method or (second is NULL and first is not NULL):
        return first
    if type(second) is Method or (first is NULL and second is not NULL):
        return second
    return UNKNOWN


def _then(value: object, kind: str, key: object) -> object:
    """`value` read further by one step, each option of a `OneOf` alike."""
    if type(value) is Ref:
        return value.then(kind, key)
    if type(value) is OneOf and all(type(o) is Ref for o in value.options):
        return OneOf(frozenset(o.then(kind, key) for o in value.options))
    return UNKNOWN


def _attribute(value: object, name: str) -> object:
    return _then(value, "attr", name)


def _item(container: object, key: object) -> object:
    return _then(container, "item", key) if type(key) in (Const, Ref) else UNKNOWN


def _push_method(stack: Stack, receiver: object, name: str) -> None:
    # 3.11/3.12 push [method|NULL, self|attribute], 3.13+ [method|attribute, self|NULL]:
    # either way `_callable_of` finds the `Method` beside the NULL.
    stack.extend((Method(receiver, name), NULL))


def _extend(stack: Stack, depth: int, kind: type, part: object) -> None:
    """LIST_EXTEND / DICT_MERGE: add ``*part`` / ``**part`` to the list or dict below."""
    target = _peek(stack, depth)
    if type(target) is kind:
        extra = part.items if type(part) is kind else (Star(part),)
        _replace(stack, depth, kind(target.items + extra))
    else:
        _replace(stack, depth, UNKNOWN)


def _call(stack: Stack, argc: int, names: tuple | None) -> CallShape:
    """CALL / CALL_KW with `argc` arguments, the last ``len(names)`` by keyword."""
    items = _popn(stack, argc + 2)
    func = _callable_of(items[0], items[1])
    if names is None:
        shape = CallShape(func, UNKNOWN, UNKNOWN)
    else:
        shape = CallShape(func, Args(tuple(items[2 : 2 + argc - len(names)])), Kwargs(names))
    stack.append(Result(shape))
    return shape


def _call_ex(stack: Stack, arg: int) -> CallShape:
    """CALL_FUNCTION_EX: a callable, a positional sequence and maybe a keyword dict."""
    if PY >= (3, 14):  # the kwargs slot is always there: NULL or a dict
        kwargs = _pop(stack)
        kwargs = Kwargs(()) if kwargs is NULL else kwargs
    else:
        kwargs = _pop(stack) if arg & 1 else Kwargs(())
    args = _pop(stack)
    func = _callable_of(*_popn(stack, 2))
    shape = CallShape(func, args, kwargs)
    stack.append(Result(shape))
    return shape


State = dict  # per-path facts besides the stack: the pending KW_NAMES on 3.11/3.12

Handler = Callable[[Stack, Instruction, CodeType, State], "CallShape | None"]
_HANDLERS: dict[str, Handler] = {}


def _handles(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            _HANDLERS[name] = handler
        return handler

    return register


@_handles("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_BORROW",
          "LOAD_DEREF", "LOAD_CLASSDEREF")  # fmt: skip
def _load_fast(stack, ins, code, state):
    stack.append(Ref("fast", ins.argval))


@_handles("LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW")
def _load_fast_pair(stack, ins, code, state):
    stack.extend(Ref("fast", name) for name in ins.argval)


@_handles("STORE_FAST_LOAD_FAST")
def _store_load(stack, ins, code, state):
    _pop(stack)
    stack.append(Ref("fast", ins.argval[1]))


@_handles("LOAD_GLOBAL")
def _load_global(stack, ins, code, state):
    ref = Ref("global", ins.argval)
    if ins.arg & 1:
        stack.extend((ref, NULL) if PY >= (3, 13) else (NULL, ref))
    else:
        stack.append(ref)


@_handles("LOAD_NAME")
def _load_name(stack, ins, code, state):
    stack.append(Ref("name", ins.argval))


@_handles("LOAD_CONST", "LOAD_SMALL_INT")
def _load_const(stack, ins, code, state):
    stack.append(Const.of(ins.argval))


@_handles("LOAD_COMMON_CONSTANT")
def _load_common_constant(stack, ins, code, state):
    # 3.15 loads None, True, False, '' and -1 this way: `cmds[-1].launch(None)` and
    # `**configs[-1]` are read as exactly as with any other constant.
    known = ins.arg is not None and 0 <= ins.arg < len(COMMON_CONSTANTS)
    stack.append(Const.of(COMMON_CONSTANTS[ins.arg]) if known else UNKNOWN)


@_handles("PUSH_NULL")
def _push_null(stack, ins, code, state):
    stack.append(NULL)


@_handles("LOAD_METHOD")
def _load_method(stack, ins, code, state):
    _push_method(stack, _pop(stack), ins.argval)


@_handles("LOAD_ATTR")
def _load_attr(stack, ins, code, state):
    receiver = _pop(stack)
    if PY >= (3, 12) and ins.arg & 1:
        _push_method(stack, receiver, ins.argval)
    else:
        stack.append(_attribute(receiver, ins.argval))


@_handles("BINARY_SUBSCR")
def _subscript(stack, ins, code, state):
    key = _pop(stack)
    stack.append(_item(_pop(stack), key))


@_handles("BINARY_OP")
def _binary_op(stack, ins, code, state):
    if ins.arg == _NB_SUBSCR:
        return _subscript(stack, ins, code, state)
    _popn(stack, 2)
    stack.append(UNKNOWN)
    return None


@_handles("BUILD_TUPLE", "BUILD_LIST")
def _build_sequence(stack, ins, code, state):
    stack.append(Args(tuple(_popn(stack, ins.arg))))


@_handles("LIST_EXTEND")
def _list_extend(stack, ins, code, state):
    _extend(stack, ins.arg, Args, _pop(stack))


@_handles("LIST_APPEND")
def _list_append(stack, ins, code, state):
    value = _pop(stack)
    target = _peek(stack, ins.arg)
    _replace(stack, ins.arg, Args((*target.items, value)) if type(target) is Args else UNKNOWN)


@_handles("LIST_TO_TUPLE")
def _list_to_tuple(stack, ins, code, state):
    pass  # the list becomes a tuple of the same items


@_handles("CALL_INTRINSIC_1")
def _intrinsic(stack, ins, code, state):
    if ins.arg != _INTRINSIC_LIST_TO_TUPLE:
        _pop(stack)
        stack.append(UNKNOWN)


def _keyword(key: object) -> object:
    """A dict display's key as a keyword name: spelled out (str), read back (`Name`), or
    UNKNOWN."""
    if type(key) is Const:
        return key.value if key.kind is str else UNKNOWN
    return Name(key) if type(key) in (Ref, OneOf) else UNKNOWN


@_handles("BUILD_MAP")
def _build_map(stack, ins, code, state):
    keys = [_keyword(k) for k in _popn(stack, 2 * ins.arg)[::2]]
    stack.append(UNKNOWN if any(k is UNKNOWN for k in keys) else Kwargs(tuple(keys)))


@_handles("BUILD_CONST_KEY_MAP")
def _build_const_key_map(stack, ins, code, state):
    keys = _pop(stack)
    _popn(stack, ins.arg)
    named = type(keys) is Const and all(type(k) is str for k in keys.value)
    stack.append(Kwargs(tuple(keys.value)) if named else UNKNOWN)


@_handles("DICT_MERGE", "DICT_UPDATE")
def _dict_merge(stack, ins, code, state):
    _extend(stack, ins.arg, Kwargs, _pop(stack))


@_handles("PRECALL")
def _precall(stack, ins, code, state):
    pass  # 3.11: dis.stack_effect books the arguments' pops here, CALL does them


@_handles("KW_NAMES")
def _kw_names(stack, ins, code, state):
    state["kwnames"] = code.co_consts[ins.arg]


@_handles("CALL")
def _call_op(stack, ins, code, state):
    names = state.pop("kwnames", ())
    return _call(stack, ins.arg, tuple(names))


@_handles("CALL_KW")
def _call_kw(stack, ins, code, state):
    names = _pop(stack)
    known = type(names) is Const and names.kind is tuple
    return _call(stack, ins.arg, names.value if known else None)


@_handles("CALL_FUNCTION_EX")
def _call_function_ex(stack, ins, code, state):
    return _call_ex(stack, ins.arg or 0)


@_handles("COPY")
def _copy(stack, ins, code, state):
    stack.append(_peek(stack, ins.arg))


@_handles("SWAP")
def _swap(stack, ins, code, state):
    top, other = _peek(stack, 1), _peek(stack, ins.arg)
    _replace(stack, 1, other)
    _replace(stack, ins.arg, top)


@_handles("SET_ADD", "SET_UPDATE", "MAP_ADD")
def _add_to_collection(stack, ins, code, state):
    _popn(stack, 2 if ins.opname == "MAP_ADD" else 1)
    _replace(stack, ins.arg, UNKNOWN)


def _make_function_pops(arg: int) -> int:
    if PY >= (3, 13):
        return 1  # the defaults and closure come with SET_FUNCTION_ATTRIBUTE
    return 1 + bin(arg & 0x0F).count("1")


# How many values each remaining instruction that pushes something pops (its pushes
# follow from dis.stack_effect). Instructions that read values deeper in the stack
# without popping them (FOR_ITER, GET_LEN, WITH_EXCEPT_START...) pop nothing here.
_POPS: dict[str, int | Callable[[int], int]] = {
    "BINARY_SLICE": 3, "BUILD_SET": lambda arg: arg, "BUILD_SLICE": lambda arg: arg,
    "BUILD_STRING": lambda arg: arg, "BUILD_INTERPOLATION": lambda arg: 2 + (arg & 1),
    "BUILD_TEMPLATE": 2, "CALL_INTRINSIC_2": 2, "CHECK_EG_MATCH": 2, "CHECK_EXC_MATCH": 1,
    "CLEANUP_THROW": 3, "COMPARE_OP": 2, "CONTAINS_OP": 2, "IS_OP": 2, "CONVERT_VALUE": 1,
    "FORMAT_SIMPLE": 1, "FORMAT_VALUE": lambda arg: 1 + bool(arg & 4), "FORMAT_WITH_SPEC": 2,
    "FOR_ITER": 0, "GET_AITER": 1, "GET_ANEXT": 0, "GET_AWAITABLE": 1, "GET_ITER": 1,
    "GET_LEN": 0, "GET_YIELD_FROM_ITER": 1, "IMPORT_FROM": 0, "IMPORT_NAME": 2,
    "LOAD_ASSERTION_ERROR": 0, "LOAD_BUILD_CLASS": 0, "LOAD_CLOSURE": 0, "LOAD_LOCALS": 0,
    "LOAD_FROM_DICT_OR_DEREF": 1, "LOAD_FROM_DICT_OR_GLOBALS": 1,
    "LOAD_SPECIAL": 1, "LOAD_SUPER_ATTR": 3, "MAKE_FUNCTION": _make_function_pops,
    "MATCH_CLASS": 3, "MATCH_KEYS": 0, "MATCH_MAPPING": 0, "MATCH_SEQUENCE": 0,
    "PREP_RERAISE_STAR": 2, "PUSH_EXC_INFO": 1, "RETURN_GENERATOR": 0, "SEND": 1,
    "END_SEND": 2, "SET_FUNCTION_ATTRIBUTE": 2, "TO_BOOL": 1, "UNARY_INVERT": 1,
    "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_POSITIVE": 1, "UNPACK_EX": 1,
    "UNPACK_SEQUENCE": 1, "WITH_EXCEPT_START": 0, "YIELD_VALUE": 1, "BEFORE_WITH": 1,
    "BEFORE_ASYNC_WITH": 1, "ASYNC_GEN_WRAP": 1, "JUMP_IF_FALSE_OR_POP": 1,
    "JUMP_IF_TRUE_OR_POP": 1,
}  # fmt: skip

# Instructions that push nothing: they pop what dis.stack_effect says.
_PUSH_NOTHING = frozenset({
    "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL",
    "NOT_TAKEN", "POP_TOP", "POP_ITER", "END_FOR", "STORE_FAST", "STORE_FAST_MAYBE_NULL",
    "STORE_FAST_STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR",
    "STORE_SUBSCR", "STORE_SLICE", "DELETE_FAST", "DELETE_NAME", "DELETE_GLOBAL",
    "DELETE_DEREF", "DELETE_ATTR", "DELETE_SUBSCR", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE",
    "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE", "JUMP_FORWARD", "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT", "RETURN_VALUE",
    "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "POP_EXCEPT", "END_ASYNC_FOR",
    "SETUP_ANNOTATIONS", "IMPORT_STAR", "PRINT_EXPR", "EXIT_INIT_CHECK",
})  # fmt: skip

#: After these the next instruction is reached only by a jump (or not at all).
TERMINATORS = frozenset({
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT",
    "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
})  # fmt: skip


# Instructions that bind or unbind a variable: a description on the stack that reads it
# would read the new value, not the one loaded (``f(x, (x := y))``), so it is forgotten.
_REBINDS = frozenset({
    "STORE_FAST", "STORE_FAST_MAYBE_NULL", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST",
    "DELETE_FAST", "LOAD_FAST_AND_CLEAR", "STORE_DEREF", "DELETE_DEREF", "STORE_NAME",
    "DELETE_NAME", "STORE_GLOBAL", "DELETE_GLOBAL",
})  # fmt: skip


def _rebound(ins: Instruction) -> frozenset[str]:
    if ins.opname == "STORE_FAST_LOAD_FAST":
        return frozenset(ins.argval[:1])
    if ins.opname == "STORE_FAST_STORE_FAST":
        return frozenset(ins.argval)
    return frozenset((ins.argval,))


def _forget(stack: Stack, names: frozenset[str]) -> None:
    for i, value in enumerate(stack):
        if reads(value, names):
            stack[i] = UNKNOWN


def modelled(opname: str) -> bool:
    """Whether the model knows what `opname` pops (the others forget the whole stack)."""
    return opname in _HANDLERS or opname in _POPS or opname in _PUSH_NOTHING


def _effect(ins: Instruction, jump: bool) -> int:
    arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
    return dis.stack_effect(ins.opcode, arg, jump=jump)


def step(
    stack: Stack, ins: Instruction, code: CodeType, state: State, *, jump: bool = False
) -> CallShape | None:
    """Apply `ins` to `stack` (along its jump when `jump`); return the call's shape when it
    is a call instruction."""
    name = ins.opname
    if name in _REBINDS:
        _forget(stack, _rebound(ins))
    handler = _HANDLERS.get(name)
    if handler is not None:
        return handler(stack, ins, code, state)
    effect = _effect(ins, jump)
    if name in _PUSH_NOTHING:
        _popn(stack, -effect)
        return None
    pops = _POPS.get(name)
    if pops is None:  # unknown: keep the depth, forget every value
        depth = max(0, len(stack) + effect)
        stack[:] = [UNKNOWN] * depth
        return None
    pops = pops(ins.arg or 0) if callable(pops) else pops
    if jump and pops + effect < 0:
        pops = -effect  # the jump of FOR_ITER / JUMP_IF_*_OR_POP drops what it read
    _popn(stack, pops)
    stack.extend([UNKNOWN] * (pops + effect))
    return None
