"""The bytecode decoder against `dis`, and the call-site analysis built on it.

`callsite.bytecode` reads instructions straight from ``co_code`` instead of through
``dis.get_instructions``. It must read the same: every instruction, its opcode, name,
argument and offset, and the argument's value wherever the model reads it. And the
call sites found from it must be those found from `dis`, on every Python the suite runs
on.
"""

import dis
import importlib
import textwrap
import types

import pytest
from test_callsite_model import MODULES

from trackgen_contract.callsite import analysis, bytecode, model

_SRC = "warp._src" if importlib.util.find_spec("warp._src") else "warp"
MORE_MODULES = [f"{_SRC}.sparse", f"{_SRC}.fem.integrate"]

# Shapes that the modules above may lack: arguments past 255 (EXTENDED_ARG) for names,
# constants and jumps both ways, cells and free variables, class bodies, async loops,
# pattern matching, exception groups, assignment expressions, global stores and deletes.
_NAMES = "\n".join(f"v{i} = g{i} + {i}.5" for i in range(300))
CORPUS = textwrap.dedent(
    """
    import asyncio
    from functools import partial

    def wide(flag, launch, kw):
    {body}
        while flag:
            if flag > 1:
    {loop}
                launch(1, 2, stream=None, **kw)
            flag -= 1
        return launch(*kw, stream=v299)

    def outer(a, *args, **kwargs):
        b = a
        def inner(c):
            nonlocal b
            b = c
            return a(b, *args, stream=kwargs.get("stream"), **kwargs)
        return inner

    class Body:
        x = 1
        def method(self, launch):
            return launch(self.x, stream=self)
        y = [x for _ in range(3)]

    async def pump(source, launch):
        async for item in source:
            launch(item, stream=None)
        async with source as s:
            await launch(s, stream=None)

    def matcher(value, launch):
        match value:
            case {{"stream": s, **rest}}:
                return launch(s, **rest)
            case [first, *others] if first:
                return launch(*others, stream=first)
            case Body(x=1) | None:
                return None
        return launch(value, stream=None)

    def groups(launch):
        try:
            launch(stream=None)
        except* ValueError as errors:
            launch(errors, stream=None)
        finally:
            launch()

    def names(launch):
        global g0
        g0 = launch
        del g0
        if (n := launch(stream=None)) is not None:
            return partial(launch, n)(stream=None)
        return [launch(i, stream=None) for i in range(3)]

    def commons(launch, cmds, configs, values):
        assert values, "none"
        launch(*cmds[-1], stream=None)
        cmds[-1].launch(None)
        launch(1, **configs[""], stream=configs[True])
        return tuple(v for v in values), all(v for v in values), [None, False, -1]
    """
).format(body=textwrap.indent(_NAMES, " " * 4), loop=textwrap.indent(_NAMES, " " * 12))


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _compiled(name):
    if name == "corpus":
        return compile(CORPUS, "<corpus>", "exec")
    module = importlib.import_module(name)
    with open(module.__file__, encoding="utf-8") as source:
        return compile(source.read(), module.__file__, "exec")


def _with_dis(code):
    return [
        bytecode.Instruction(i.opname, i.opcode, i.arg, i.argval, i.offset)
        for i in dis.get_instructions(code)
    ]


def _differences(code):
    expected, found = _with_dis(code), bytecode.instructions(code)
    if len(expected) != len(found):
        return [("count", len(expected), len(found))]
    wrong = []
    for want, got in zip(expected, found, strict=True):
        if want.opcode not in bytecode.RESOLVED:
            want = want._replace(argval=None)
        if want != got:  # a tuple compares identical items equal: a NaN constant too
            wrong.append((want, got))
    return wrong


def test_the_corpus_has_the_rare_shapes():
    opnames = {
        i.opname for code in _code_objects(_compiled("corpus")) for i in dis.get_instructions(code)
    }
    assert "EXTENDED_ARG" in opnames
    assert {"LOAD_DEREF", "STORE_DEREF", "DELETE_GLOBAL", "STORE_GLOBAL", "LOAD_NAME"} <= opnames
    assert opnames & {"JUMP_BACKWARD", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE"}
    assert ("LOAD_COMMON_CONSTANT" in opnames) == bool(model.COMMON_CONSTANTS)


@pytest.mark.parametrize("name", [*MODULES, *MORE_MODULES, "corpus"])
def test_the_decoder_reads_what_dis_reads(name):
    checked = 0
    for code in _code_objects(_compiled(name)):
        assert _differences(code) == [], f"{code.co_qualname} in {code.co_filename}"
        checked += 1
    assert checked > 5


@pytest.mark.parametrize("name", [*MODULES, *MORE_MODULES, "corpus"])
def test_the_call_sites_are_those_found_through_dis(name, monkeypatch):
    codes = list(_code_objects(_compiled(name)))
    found = [analysis.analyse(code) for code in codes]
    monkeypatch.setattr(analysis.bytecode, "instructions", _with_dis)
    expected = [analysis.analyse(code) for code in codes]
    calls = 0
    for code, want, got in zip(codes, expected, found, strict=True):
        assert got.keys() == want.keys(), code.co_qualname
        for offset, site in want.items():
            other = got[offset]
            assert (other.shape, other.offset, other.direct) == (
                site.shape,
                site.offset,
                site.direct,
            ), f"{code.co_qualname} at {offset}"
        calls += len(want)
    assert calls > 20


def test_another_python_is_decoded_by_dis(monkeypatch):
    code = _compiled("corpus")
    monkeypatch.setattr(bytecode, "PY", (3, 16))
    assert bytecode.instructions(code) == _with_dis(code)


def _crafted(*units):
    """A function's code with its instructions replaced by `units` (opname, arg) after
    its RESUME and RESUME's caches."""
    start = list(dis.get_instructions(_crafted.__code__))[1].offset  # past RESUME
    body = bytes(b for name, arg in units for b in (dis.opmap[name], arg))
    return _crafted.__code__.replace(co_code=_crafted.__code__.co_code[:start] + body)


def test_an_argument_past_a_c_int_wraps_as_in_dis():
    # Hand-made bytecode: four prefixes carry the sign bit of the C int the argument is.
    code = _crafted(
        ("EXTENDED_ARG", 0x80),
        ("EXTENDED_ARG", 0),
        ("EXTENDED_ARG", 0),
        ("BUILD_TUPLE", 1),
        ("RETURN_VALUE", 0),
    )
    assert _differences(code) == []
    assert bytecode.instructions(code)[-2].arg < 0
