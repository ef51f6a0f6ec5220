"""Property tests: generated call shapes of ``wp.launch`` and ``wp.copy``, judged against the
truth known from how each call was written.

Each example writes the source of a small function that calls Warp one way (keywords,
``*args``, ``**kwargs``, both, ``functools.partial``, an alias, an attribute of an object),
with ``stream=None`` passed or not, compiles it, and runs it under a stream guard. The
guard must report "without stream=" exactly when the written call passed no stream.
Launches have ``dim=0``: Warp checks nothing and runs nothing, so any inputs will do.
"""

import functools

import warp as wp
from acme.kernels import add_one
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trackgen_contract import stream_explicit

ARR = wp.zeros(8, dtype=float, device="cpu")
DST = wp.zeros(8, dtype=float, device="cpu")

APIS = {
    "wp.launch": (("kernel", "dim", "inputs", "outputs", "adj_inputs", "adj_outputs", "device",
                   "stream"), 2),
    "wp.copy": (("dest", "src", "dest_offset", "src_offset", "count", "stream"), 2),
}  # fmt: skip
VALUES = {
    "kernel": "k", "dim": "0", "inputs": "[arr]", "outputs": "[]", "adj_inputs": "[]",
    "adj_outputs": "[]", "device": '"cpu"', "stream": "None", "dest": "dst", "src": "arr",
    "dest_offset": "0", "src_offset": "0", "count": "8",
}  # fmt: skip
FORMS = ("direct", "star", "starstar", "both", "partial", "alias", "holder")


class Holder:
    pass


@st.composite
def calls(draw):
    api = draw(st.sampled_from(sorted(APIS)))
    params, required = APIS[api]
    count = draw(st.integers(required, len(params)))
    positional = list(params[:count])
    keywords = (
        draw(st.lists(st.sampled_from(params[count:]), unique=True)) if count < len(params) else []
    )
    form = draw(st.sampled_from(FORMS))
    bound = draw(st.integers(0, count))  # for a partial: positionals bound ahead
    bound_kw = draw(st.integers(0, len(keywords)))
    return api, positional, keywords, form, bound, bound_kw


def source(api, positional, keywords, form, bound, bound_kw):
    """The text of `probe()`, which makes the call as drawn."""
    pos = [VALUES[p] for p in positional]
    kws = [f"{k}={VALUES[k]}" for k in keywords]
    kw_dict = "{" + ", ".join(f"{k!r}: {VALUES[k]}" for k in keywords) + "}"
    tup = "(" + "".join(f"{v}, " for v in pos) + ")"
    lines = []
    if form == "direct":
        call = f"{api}({', '.join(pos + kws)})"
    elif form == "star":
        lines.append(f"args = {tup}")
        call = f"{api}(*args{''.join(', ' + k for k in kws)})"
    elif form == "starstar":
        lines.append(f"kw = {kw_dict}")
        call = f"{api}({''.join(v + ', ' for v in pos)}**kw)"
    elif form == "both":
        lines += [f"args = {tup}", f"kw = {kw_dict}"]
        call = f"{api}(*args, **kw)"
    elif form == "partial":
        ahead = pos[:bound] + kws[:bound_kw]
        lines.append(f"p = functools.partial({', '.join([api, *ahead])})")
        call = f"p({', '.join(pos[bound:] + kws[bound_kw:])})"
    elif form == "alias":
        lines.append(f"fn = {api}")
        call = f"fn({', '.join(pos + kws)})"
    else:
        lines += ["h = Holder()", f"h.fn = {api}"]
        call = f"h.fn({', '.join(pos + kws)})"
    body = "".join(f"    {line}\n" for line in [*lines, call])
    return f"def probe(wp, functools, Holder, k, arr, dst):\n{body}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls())
def test_stream_verdict_matches_the_written_call(shape):
    api, positional, keywords = shape[:3]
    namespace = {}
    text = source(*shape)
    exec(compile(text, f"<probe {api}>", "exec"), namespace)
    with stream_explicit(strict=False) as guard:
        namespace["probe"](wp, functools, Holder, add_one, ARR, DST)
    passed = "stream" in positional or "stream" in keywords
    reported = [v.api for v in guard.violations]
    assert reported == ([] if passed else [f"{api} without stream="]), text
