"""The call-site decoder's stack model against the running Python's own bytecode.

The model (`callsite.model`) describes the values on the caller's stack; it is only right
if it pushes and pops what CPython's compiler says each instruction does. Two checks, on
every Python the suite runs on:

- every opcode that can appear in a code object is modelled (a new Python's new opcodes
  make this fail, rather than silently forgetting stack values);
- on every code object of Warp's core modules and of a dozen standard modules, the depth
  the analysis finds at each instruction equals the depth CPython's compiler computes
  from ``dis.stack_effect`` (with the two known differences: 3.11's PRECALL, whose pops
  the model books at CALL, and nothing popped below the bottom of the stack).
"""

import dis
import importlib
import sys
import types

import pytest

from trackgen_contract.callsite import analysis, model

# Opcodes that never appear in a code object's co_code (run-time forms, placeholders).
NOT_IN_CODE = {"RESERVED", "INTERPRETER_EXIT", "ENTER_EXECUTOR", "TRACE_RECORD"}

MODULES = [
    "warp._src.context" if importlib.util.find_spec("warp._src") else "warp.context",
    "warp._src.types" if importlib.util.find_spec("warp._src") else "warp.types",
    "json.decoder",
    "asyncio.tasks",
    "dataclasses",
    "argparse",
    "inspect",
    "collections",
    "functools",
    "logging",
    "tokenize",
    "enum",
    "email.message",
    "concurrent.futures.thread",
]


def test_every_opcode_of_this_python_is_modelled():
    specialized = set()
    for family in getattr(dis, "_specializations", {}).values():
        specialized.update(family)
    missing = [
        name
        for name, code in dis.opmap.items()
        if code < 256
        and not name.startswith("INSTRUMENTED")
        and name not in specialized
        and name not in NOT_IN_CODE
        and not model.modelled(name)
    ]
    assert missing == []


def _compiler_depths(code, instructions):
    """The stack depth at each reachable instruction, as CPython's compiler counts it."""
    index = {ins.offset: i for i, ins in enumerate(instructions)}
    depths = {instructions[0].offset: 0}
    for handler in dis.Bytecode(code).exception_entries:
        depths[handler.target] = handler.depth + handler.lasti + 1
    work = list(depths)
    while work:
        offset = work.pop()
        i = index[offset]
        ins = instructions[i]
        following = instructions[i + 1].offset if i + 1 < len(instructions) else None
        for target, jump in analysis._successors(ins, following):
            arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
            effect = dis.stack_effect(ins.opcode, arg, jump=jump)
            if ins.opname == "PRECALL":
                effect = 0  # 3.11: the model pops the arguments at CALL
            if ins.opname == "CALL" and sys.version_info < (3, 12):
                effect = -(ins.arg + 1)
            depth = max(0, depths[offset] + effect)
            if target in index and target not in depths:
                depths[target] = depth
                work.append(target)
    return depths


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


@pytest.mark.parametrize("name", MODULES)
def test_the_models_stack_depth_is_cpythons(name):
    module = importlib.import_module(name)
    with open(module.__file__, encoding="utf-8") as source:
        top = compile(source.read(), module.__file__, "exec")
    checked = 0
    for code in _code_objects(top):
        instructions = list(dis.get_instructions(code))
        expected = _compiler_depths(code, instructions)
        found = analysis._fixpoint(code, instructions)
        wrong = {
            offset: (len(stack), expected[offset])
            for offset, (stack, _) in found.items()
            if offset in expected and len(stack) != expected[offset]
        }
        assert wrong == {}, f"{code.co_qualname} in {module.__file__}: (model, CPython) {wrong}"
        checked += 1
    assert checked > 5
