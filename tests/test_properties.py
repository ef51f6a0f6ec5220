"""Property tests: generated call shapes of ``wp.launch``, ``wp.launch_tiled``, ``wp.copy`` and
``wp.Launch.launch``, judged against the truth known from how each call was written.

Each example writes the source of a small function that calls Warp one way and compiles it:

- the callable: the function itself, an alias, an attribute, a dict entry, a branch whose
  two sides load the same callable (spelled alike or not), a ``functools.partial`` (kept,
  made inline, made inline around one made inline, held in a list and called by index);
  for ``Launch.launch`` a bound method (of a receiver picked by a branch too), the unbound
  function, either one aliased, a partial of either, one of both picked from a list, and
  ``type(cmd).launch``;
- the arguments: spelled out, ``*args``, ``**kwargs``, both, ``**`` of a subscript (by a
  local or a constant key), of an attribute, of a property, of a dict display whose keys
  are variables, of one of two dicts with the same keys picked by a branch; one of them
  may be a branch.

The guard's verdict must be the truth wherever the shape can be read back without running
code; where it cannot (``type(cmd).launch``, a property), the call must be judged on its
bound values (the README's limits): ``explicit`` None, and ``stream=None`` reported missing.
The probe runs twice beside a tracer (the second run served from the per-code caches), then
twice under a guard alone (a site found clean answered from the caller's frame): all agree.
Launches have ``dim=0`` (a recorded launch has 8 threads): Warp runs next to nothing.
"""

import functools
from dataclasses import dataclass

import warp as wp
from acme.kernels import add_one
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trackgen_contract import Tracer, stream_explicit

ARR = wp.zeros(8, dtype=float, device="cpu")
DST = wp.zeros(8, dtype=float, device="cpu")
CMD = wp.launch(add_one, dim=8, inputs=[ARR], device="cpu", record_cmd=True)

LAUNCH = ("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device", "stream")


@dataclass(frozen=True)
class Api:
    params: tuple[str, ...]  # in positional order
    required: int  # positional parameters every call passes
    max_positional: int
    must: tuple[str, ...] = ()  # keywords every call passes (launch_tiled's dim, block_dim)


APIS = {
    "wp.launch": Api(LAUNCH, 2, 8),
    "wp.launch_tiled": Api((*LAUNCH, "block_dim"), 1, 1, ("dim", "block_dim")),
    "wp.copy": Api(("dest", "src", "dest_offset", "src_offset", "count", "stream"), 2, 6),
    "wp.Launch.launch": Api(("self", "stream"), 1, 2),
}
VALUES = {
    "kernel": "k", "dim": "0", "inputs": "[arr]", "outputs": "[]", "adj_inputs": "[]",
    "adj_outputs": "[]", "device": '"cpu"', "stream": "None", "dest": "dst", "src": "arr",
    "dest_offset": "0", "src_offset": "0", "count": "8", "block_dim": "1", "self": "cmd",
}  # fmt: skip

# How the callable is reached. The unknowable ones are judged on bound values.
FUNCTION_FORMS = (
    "direct", "alias", "holder", "table", "branch", "branch of aliases", "partial",
    "inline partial", "inline partial of an inline partial", "partial by index",
    "partial on an object",
)  # fmt: skip
METHOD_FORMS = (
    "bound", "bound alias", "bound to a branch", "unbound", "unbound alias",
    "partial of unbound", "partial of bound", "mixed list", "type(cmd)",
)  # fmt: skip
# How the call's own arguments are packed.
PACKINGS = (
    "plain", "star", "starstar", "both", "** of a subscript", "** of a constant subscript",
    "** of an attribute", "** of a property", "* of a subscript", "** of variable keys",
    "** of a branch",
)  # fmt: skip
UNKNOWABLE = {"type(cmd)", "** of a property"}


class Holder:
    pass


class Props:
    """Keyword arguments behind a property: reading them back would run it."""

    def __init__(self, kw):
        self._kw = kw

    @property
    def kw(self):
        return self._kw


def _same(value):
    return value


@dataclass(frozen=True)
class Shape:
    api: str
    positional: tuple[str, ...]
    keywords: tuple[str, ...]
    form: str
    packing: str
    bound: int  # for a partial: positionals bound ahead
    bound_kw: int  # for a partial: keywords bound ahead
    branch: int  # -1: none; else the index of the call's own argument written as a branch
    pick: int  # for "mixed list": which of the two callables

    @property
    def truth(self):
        return frozenset(self.positional) | frozenset(self.keywords)

    @property
    def knowable(self):
        # A receiver written as a branch is gone once its method is loaded:
        # `(cmd if c else cmd2).launch(...)` may bind it or not, nothing says which.
        branching_receiver = self.branch == 0 and self.form in (
            "bound",
            "bound to a branch",
            "partial of bound",
        )
        return not (self.form in UNKNOWABLE or self.packing in UNKNOWABLE or branching_receiver)


@st.composite
def shapes(draw):
    api = draw(st.sampled_from(sorted(APIS)))
    spec = APIS[api]
    count = draw(st.integers(spec.required, spec.max_positional))
    optional = [p for p in spec.params[count:] if p not in spec.must]
    extra = draw(st.lists(st.sampled_from(optional), unique=True)) if optional else []
    keywords = (*spec.must, *extra)
    forms = METHOD_FORMS if api == "wp.Launch.launch" else FUNCTION_FORMS
    form = draw(st.sampled_from(forms))
    packing = draw(st.sampled_from(PACKINGS))
    own = count - (1 if api == "wp.Launch.launch" else 0)  # self goes with the callable
    bound = draw(st.integers(0, max(0, own)))
    bound_kw = draw(st.integers(0, len(keywords)))
    branch = draw(st.integers(-1, count + len(keywords) - 1))
    pick = draw(st.integers(0, 1))
    return Shape(api, spec.params[:count], keywords, form, packing, bound, bound_kw, branch, pick)


def _callable(shape, pos, kws, lines):
    """The callable expression, with the arguments a partial binds ahead taken out of
    `pos` and `kws` (lists of value texts and ``name=value`` texts)."""
    api, form = shape.api, shape.form
    if api == "wp.Launch.launch":
        receiver, pos[:] = pos[0], pos[1:]
        if form == "mixed list":  # a bound method or a partial binding self, by index
            lines += [
                f"fns = [{receiver}.launch, functools.partial(wp.Launch.launch, {receiver})]",
                f"i = {shape.pick}",
            ]
            return "fns[i]"
        if form in ("partial of unbound", "partial of bound"):
            ahead = pos[: shape.bound] + kws[: shape.bound_kw]
            pos[:], kws[:] = pos[shape.bound :], kws[shape.bound_kw :]
            if form == "partial of unbound":
                return f"functools.partial(wp.Launch.launch, {', '.join([receiver, *ahead])})"
            return f"functools.partial({', '.join([f'{receiver}.launch', *ahead])})"
        if form == "bound":
            return f"{receiver}.launch"
        if form == "bound to a branch":
            lines.append(f"other = {receiver}")
            return f"({receiver} if c else other).launch"
        if form == "bound alias":
            lines.append(f"fn = {receiver}.launch")
            return "fn"
        pos.insert(0, receiver)
        if form == "unbound":
            return "wp.Launch.launch"
        if form == "unbound alias":
            lines.append("fn = wp.Launch.launch")
            return "fn"
        return f"type({receiver}).launch"
    if "partial" in form:
        ahead = pos[: shape.bound] + kws[: shape.bound_kw]
        pos[:], kws[:] = pos[shape.bound :], kws[shape.bound_kw :]
        made = f"functools.partial({', '.join([api, *ahead])})"
        if form == "inline partial":
            return made
        if form == "inline partial of an inline partial":
            return f"functools.partial({made})"
        if form == "partial by index":
            lines += [f"partials = [None, {made}]", "i = 1"]
            return "partials[i]"
        if form == "partial on an object":
            lines += ["h = Holder()", f"h.p = {made}"]
            return "h.p"
        lines.append(f"p = {made}")
        return "p"
    if form == "alias":
        lines.append(f"fn = {api}")
        return "fn"
    if form == "holder":
        lines += ["h = Holder()", f"h.fn = {api}"]
        return "h.fn"
    if form == "table":
        lines.append(f"table = {{'fn': {api}}}")
        return "table['fn']"
    if form == "branch":
        return f"({api} if c else {api})"
    if form == "branch of aliases":
        lines.append(f"fn = {api}")
        return f"({api} if c else fn)"
    return api


def source(shape):
    """The text of `probe()`, which makes the call as drawn."""
    names = (*shape.positional, *shape.keywords)
    values = [VALUES[name] for name in names]
    if shape.branch >= 0:  # two sides the model describes differently, one value
        values[shape.branch] = f"({values[shape.branch]} if c else same({values[shape.branch]}))"
    count = len(shape.positional)
    pos = values[:count]
    kws = [f"{name}={value}" for name, value in zip(shape.keywords, values[count:], strict=True)]
    lines = ["c = True"]
    func = _callable(shape, pos, kws, lines)
    kw_dict = "{" + ", ".join(f"{k.split('=', 1)[0]!r}: {k.split('=', 1)[1]}" for k in kws) + "}"
    tup = "(" + "".join(f"{v}, " for v in pos) + ")"
    packing = shape.packing
    if packing == "plain":
        args = [*pos, *kws]
    elif packing == "star":
        lines.append(f"args = {tup}")
        args = ["*args", *kws]
    elif packing == "* of a subscript":
        lines += [f"seqs = [(), {tup}]", "j = 1"]
        args = ["*seqs[j]", *kws]
    elif packing == "** of variable keys":
        names = [k.split("=", 1)[0] for k in kws]
        lines += [f"n{i} = {name!r}" for i, name in enumerate(names)]
        pairs = ", ".join(f"n{i}: {k.split('=', 1)[1]}" for i, k in enumerate(kws))
        args = [*pos, f"**{{{pairs}}}"]
    elif packing == "** of a branch":
        lines += [f"kw = {kw_dict}", "kw2 = dict(kw)"]
        args = [*pos, "**(kw if c else kw2)"]
    elif packing == "both":
        lines += [f"args = {tup}", f"kw = {kw_dict}"]
        args = ["*args", "**kw"]
    else:
        star = {
            "starstar": "**kw",
            "** of a subscript": "**cfg[key]",
            "** of a constant subscript": "**cfg['on']",
            "** of an attribute": "**o.kw",
            "** of a property": "**props.kw",
        }[packing]
        lines += [
            f"kw = {kw_dict}",
            "cfg, key = {'off': {}, 'on': kw}, 'on'",
            "o = Holder()",
            "o.kw = kw",
            "props = Props(kw)",
        ]
        args = [*pos, star]
    call = f"{func}({', '.join(args)})"
    body = "".join(f"    {line}\n" for line in [*lines, call])
    return f"def probe(wp, functools, Holder, Props, same, k, arr, dst, cmd):\n{body}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes())
def test_stream_verdict_matches_the_written_call(shape):
    namespace = {}
    text = source(shape)
    exec(compile(text, f"<probe {shape.api}>", "exec"), namespace)
    seen, keywords = [], []

    def on_call(call):
        if call.op in ("launch", "copy") and call.direct:
            seen.append((call.api, call.explicit))
            keywords.append(call.keywords)

    with stream_explicit(strict=False) as guard, Tracer(on_call):
        for _ in range(2):  # the second run hits the caches filled by the first
            namespace["probe"](wp, functools, Holder, Props, _same, add_one, ARR, DST, CMD)
    assert [api for api, _ in seen] == [shape.api] * 2, text
    (_, explicit), again = seen
    assert again == seen[0], text
    if shape.knowable:
        assert explicit == shape.truth, text
    else:
        assert explicit in (None, shape.truth), text
    # Where the whole call is unknowable, a keyword the call surely passed still counts
    # (a partial's own keywords, or one spelled out beside an unreadable ** part).
    certain = keywords[0]
    if certain is not None:
        assert certain <= shape.truth, text
    passed = "stream" in (explicit if explicit is not None else certain or frozenset())
    expected = [] if passed else [f"{shape.api} without stream="] * 2
    assert [v.api for v in guard.violations] == expected, text
    # A guard alone remembers a site it found clean and answers it from the caller's frame.
    with stream_explicit(strict=False) as alone:
        for _ in range(2):
            namespace["probe"](wp, functools, Holder, Props, _same, add_one, ARR, DST, CMD)
    assert [v.api for v in alone.violations] == expected, text
