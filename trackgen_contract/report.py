"""How the command line shows a `Recording`: a terminal report and a JSON document.

The JSON document follows ``report.schema.json`` beside this module; `SCHEMA_VERSION`
changes whenever a field changes meaning or goes away.
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from importlib import resources

from .recording import Scoped
from .rules import CATEGORIES, HINTS, Violation
from .sites import Site
from .tracer import BACKEND

SCHEMA_VERSION = 1

_BOLD, _RED, _GREEN, _DIM = "1", "31", "32", "2"


def schema() -> dict:
    """The JSON Schema of `to_json`'s document."""
    return json.loads(resources.files(__package__).joinpath("report.schema.json").read_text())


def _scope(hot_paths: tuple[str, ...]) -> str:
    if hot_paths:
        return "checked inside hot paths: " + ", ".join(hot_paths)
    return (
        "checked the whole run: no hot path was named "
        "(mark one with @trackgen_contract.hot_path or --hot module:function)"
    )


class _Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, *codes: str) -> str:
        if not self.colour or not codes:
            return text
        return f"\033[{';'.join(codes)}m{text}\033[0m"


def render(scoped: Scoped, *, program: str, colour: bool = False) -> str:
    """The terminal report: breaches by category then site, then every Warp API seen."""
    style = _Style(colour)
    breaches = scoped.breaches
    total = sum(breaches.values())
    if total:
        sites = len(breaches)
        head = style(
            f"{total} breaching call{'s' * (total != 1)} at {sites} site{'s' * (sites != 1)}",
            _BOLD,
            _RED,
        )
    else:
        head = style("no hot-path contract breach", _BOLD, _GREEN)
    lines = [f"trackgen_contract: {head} in {program}", style(_scope(scoped.hot_paths), _DIM)]
    for category in CATEGORIES:
        lines += _category_lines(category, breaches, style)
    lines += ["", *_table(scoped, style)]
    return "\n".join(lines)


def _category_lines(category: str, breaches: Counter[Violation], style: _Style) -> list[str]:
    found = [(v, n) for v, n in breaches.items() if v.category == category]
    if not found:
        return []
    calls = sum(n for _, n in found)
    title = f"{category.replace('_', ' ')}: {calls} call{'s' * (calls != 1)}"
    lines = ["", f"{style(title, _BOLD)}. {HINTS[category]}"]
    width = max(len(v.api) for v, _ in found)
    for violation, count in sorted(found, key=lambda item: (-item[1], str(item[0]))):
        site = violation.site
        lines.append(
            f"  {style(f'{count:>5}x', _RED)}  {violation.api:<{width}}  {site.function}  "
            f"{site.location}"
        )
        source = site.source_line()
        if source:
            lines.append(f"         {style(source, _DIM)}")
    return lines


def _table(scoped: Scoped, style: _Style) -> list[str]:
    apis = scoped.recording.apis
    if not apis:
        return ["no watched Warp call was made"]
    rows = sorted(apis.items(), key=lambda item: (-item[1].calls, item[0]))
    width = max(len("Warp API"), *(len(api) for api, _ in rows))
    header = f"  {'Warp API':<{width}}  {'calls':>7}  {'in hot paths':>12}  {'breaches':>8}"
    lines = [style("Warp calls seen", _BOLD), style(header, _DIM)]
    for api, count in rows:
        n = scoped.api_breaches(count)
        breaches = style(f"{n:>8}", _RED) if n else f"{0:>8}"
        lines.append(f"  {api:<{width}}  {count.calls:>7}  {count.in_hot_paths:>12}  {breaches}")
    return lines


def _site(site: Site) -> dict:
    return {
        "module": site.module,
        "function": site.function,
        "filename": site.filename,
        "lineno": site.lineno,
        "source": site.source_line(),
    }


def _breach(violation: Violation, count: int) -> dict:
    return {
        "category": violation.category,
        "api": violation.api,
        "count": count,
        "site": _site(violation.site),
        "key": list(violation.key),
    }


def to_json(scoped: Scoped, *, argv: list[str], exit_status: int, warp_version: str | None) -> dict:
    """The machine-readable report (see `schema`)."""
    policy = scoped.recording.policy
    order = {c: i for i, c in enumerate(CATEGORIES)}
    breaches = sorted(
        scoped.breaches.items(), key=lambda item: (order[item[0].category], -item[1], str(item[0]))
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "program": list(argv),
        "exit_status": exit_status,
        "python": platform.python_version(),
        "backend": BACKEND,
        "warp_version": warp_version,
        "checks": [c for c in CATEGORIES if c in policy.checks],
        "modules": None if policy.modules is None else list(policy.modules),
        "scope": {"hot_paths": list(scoped.hot_paths), "whole_run": not scoped.hot_paths},
        "breach_count": scoped.total,
        "breaches": [_breach(v, n) for v, n in breaches],
        "calls": [
            {
                "api": api,
                "calls": c.calls,
                "in_hot_paths": c.in_hot_paths,
                "breaches": scoped.api_breaches(c),
            }
            for api, c in sorted(scoped.recording.apis.items())
        ],
        "allowed": [{"key": list(k), "count": n} for k, n in sorted(scoped.allowed.items())],
        "sanctioned": [{"key": list(k), "count": n} for k, n in sorted(scoped.sanctioned.items())],
    }
