"""How the command line shows a run: a terminal report and a JSON document.

The JSON document follows ``report.schema.json`` beside this module; `SCHEMA_VERSION`
changes whenever a field changes meaning or goes away.
"""

from __future__ import annotations

import json
import platform
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from .baseline import Entry
from .pragmas import Pragma
from .recording import ApiCount, CallName, Row, Scoped
from .rules import CATEGORIES, HINTS, Key
from .sites import Site
from .tracer import BACKEND

SCHEMA_VERSION = 2

_BOLD, _RED, _GREEN, _YELLOW, _DIM = "1", "31", "32", "33", "2"


def schema() -> dict:
    """The JSON Schema of `to_json`'s document."""
    return json.loads(resources.files(__package__).joinpath("report.schema.json").read_text())


@dataclass(frozen=True)
class Outcome:
    """How a run ended: the exit status, the program's own status (None when ``--strict``
    stopped it) and what the status means, in words."""

    status: int
    program_status: int | None
    meaning: str
    # Whether the checks saw the run they were asked to: false where the program failed
    # (the calls after its failure were never made) or a pragma could not be read.
    whole: bool = True

    def __str__(self) -> str:
        return f"exit status {self.status}: {self.meaning}"


@dataclass(frozen=True)
class Findings:
    """Everything a run's report says, settled: the scope, the breaches that fail the run
    (what is left after the baseline), and what was let through, fixed or not checked."""

    scoped: Scoped
    breaches: tuple[Row, ...]
    let_through: tuple[Row, ...]  # allow keys, line pragmas, sanctioned, baseline entries
    fixed: tuple[Entry, ...] = ()
    baseline: str | None = None  # the baseline file the run was compared with
    unused_pragmas: tuple[tuple[Pragma, tuple[str, ...]], ...] = ()
    unused_allows: tuple[str, ...] = ()  # ``--allow`` texts, as given, that let nothing through
    pragma_errors: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        """Breaching calls that fail the run."""
        return sum(row.count for row in self.breaches)

    def of(self, allowed_by: str) -> list[Row]:
        """What one reason let through."""
        return [row for row in self.let_through if row.allowed_by == allowed_by]


def allow_texts(key: Key) -> tuple[str, str]:
    """The ``--allow`` option and the ``allow=`` argument that let a host sync through."""
    return f"--allow {shlex.quote(':'.join(key))}", f"allow=[{tuple(key)!r}]"


class _Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, *codes: str) -> str:
        if not self.colour or not codes:
            return text
        return f"\033[{';'.join(codes)}m{text}\033[0m"


def _scope(hot_paths: tuple[str, ...]) -> str:
    if hot_paths:
        return "checked inside hot paths: " + ", ".join(hot_paths)
    return (
        "checked the whole run (its main thread): no hot path was named "
        "(mark one with @trackgen_contract.hot_path or --hot module:function)"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _site_count(rows: Iterable[Row]) -> int:
    # Lines, not rows: one line may breach two categories (`wp.array(data)` allocates and
    # copies with no stream) and show in both.
    return len({row.site for row in rows})


def render(findings: Findings, outcome: Outcome, *, program: str, colour: bool = False) -> str:
    """The terminal report: breaches by category then site, what was let through, then
    every Warp call seen, and the exit status in words."""
    style = _Style(colour)
    total = findings.total
    if total:
        sites = _site_count(findings.breaches)
        head = style(f"{_plural(total, 'breaching call')} at {_plural(sites, 'site')}", _BOLD, _RED)
    elif findings.unchecked:  # no pass: said why below
        head = style("no breach found, but not fully checked,", _BOLD, _YELLOW)
    else:
        head = style("no hot-path contract breach", _BOLD, _GREEN)
    lines = [f"trackgen_contract: {head} in {program}"]
    lines.append(style(_scope(findings.scoped.hot_paths), _DIM))
    for category in CATEGORIES:
        lines += _category_lines(category, findings.breaches, style)
    lines += _let_through_lines(findings, style)
    lines += _baseline_lines(findings, style)
    lines += _pragma_lines(findings, style)
    lines += _unused_allow_lines(findings, style)
    for reason in findings.unchecked:
        lines += ["", style(f"nothing checked: {reason}", _BOLD, _YELLOW)]
    lines += ["", *_table(findings.scoped, style)]
    colour_of = _GREEN if outcome.status == 0 else _RED
    lines += ["", f"trackgen_contract: {style(str(outcome), _BOLD, colour_of)}"]
    return "\n".join(lines)


def _site_text(site: Site) -> str:
    return f"{site.function}  {site.location}"


def _category_lines(category: str, breaches: tuple[Row, ...], style: _Style) -> list[str]:
    found = [row for row in breaches if row.category == category]
    if not found:
        return []
    calls = sum(row.count for row in found)
    title = f"{category.replace('_', ' ')}: {_plural(calls, 'call')}"
    lines = ["", f"{style(title, _BOLD)}. {HINTS[category]}"]
    width = max(len(row.api) for row in found)
    for row in found:
        lines.append(
            f"  {style(f'{row.count:>5}x', _RED)}  {row.api:<{width}}  {_site_text(row.site)}"
        )
        source = row.site.source_line()
        if source:
            lines.append(f"         {style(source, _DIM)}")
        if category == "host_sync":
            for key in row.keys:  # the exact text that lets it through
                option, argument = allow_texts(key)
                lines.append(f"         to allow it: {option}  (or {argument})")
    if found:
        lines.append(
            style(
                f"         or accept a line: # trackgen_contract: allow {category}",
                _DIM,
            )
        )
    return lines


def _let_through_lines(findings: Findings, style: _Style) -> list[str]:
    lines = []
    for row in findings.let_through:
        if row.allowed_by == "baseline":
            continue  # summed up with the baseline
        if row.allowed_by == "pragma" and row.pragma is not None:
            why = f"by the pragma at {row.pragma.location}"
        elif row.allowed_by == "allow":
            why = "by " + ", ".join(allow_texts(k)[0] for k in row.keys)
        else:
            why = "sanctioned"
        lines.append(f"  {row.count:>5}x  {row.api}  {_site_text(row.site)}  {why}")
    if not lines:
        return []
    return ["", style("let through (not breaches):", _BOLD), *lines]


def _baseline_lines(findings: Findings, style: _Style) -> list[str]:
    if findings.baseline is None:
        return []
    accepted = findings.of("baseline")
    calls = sum(row.count for row in accepted)
    sites = _plural(_site_count(accepted), "site")
    lines = [
        "",
        style(f"baseline {findings.baseline}:", _BOLD)
        + f" accepted {_plural(calls, 'breaching call')} at {sites};"
        + f" {_plural(_site_count(findings.breaches), 'new site')}",
    ]
    if findings.fixed:
        lines.append(
            style(
                f"  fixed since the baseline ({len(findings.fixed)}): rewrite it with "
                f"--write-baseline {shlex.quote(findings.baseline)} to lock the gain in",
                _GREEN,
            )
        )
        lines += [f"    {entry}" for entry in findings.fixed]
    return lines


def _pragma_lines(findings: Findings, style: _Style) -> list[str]:
    lines = []
    for error in findings.pragma_errors:
        lines.append(style(f"error: {error}", _BOLD, _RED))
    for pragma, idle in findings.unused_pragmas:
        lines.append(
            style(
                f"unused pragma at {pragma.location}: allow {', '.join(idle)} "
                "accepted nothing in this run",
                _YELLOW,
            )
        )
    return ["", *lines] if lines else []


def _unused_allow_lines(findings: Findings, style: _Style) -> list[str]:
    # A key that matches nothing is most often misspelt (a module or a qualified name):
    # said, so that a host sync it was meant for is not thought let through.
    lines = [
        style(
            f"unused --allow {shlex.quote(text)}: it let no host sync through in what was "
            "checked (a breach's 'to allow it:' line spells the key it needs)",
            _YELLOW,
        )
        for text in findings.unused_allows
    ]
    return ["", *lines] if lines else []


_LEGEND = (
    "(inside X): a call Warp made itself while running X for the program. A launch or copy "
    "there counts as the program's own (it is made on its behalf), and so does a host sync, "
    "an allocation or a capture (checked whoever makes them), once per call of X; a memset "
    "or a ScopedStream there is Warp's own use, not a breach."
)


def _table(scoped: Scoped, style: _Style) -> list[str]:
    calls = scoped.recording.calls
    if not calls:
        return ["no watched Warp call was made"]
    ordered = _ordered_calls(calls)
    width = max(len("Warp call"), *(len(str(name)) for name, _ in ordered))
    hot = bool(scoped.hot_paths)  # else the whole run is checked: no hot-path column
    middle = f"  {'in hot paths':>12}" if hot else ""
    header = f"  {'Warp call':<{width}}  {'calls':>7}{middle}  {'breaches':>8}"
    lines = [style("Warp calls seen", _BOLD), style(header, _DIM)]
    for name, count in ordered:
        n = scoped.api_breaches(count)
        breaches = style(f"{n:>8}", _RED) if n else f"{0:>8}"
        middle = f"  {count.in_hot_paths:>12}" if hot else ""
        lines.append(f"  {name!s:<{width}}  {count.calls:>7}{middle}  {breaches}")
    if any(name.inside for name, _ in ordered):
        lines.append(style(_LEGEND, _DIM))
    return lines


def _ordered_calls(calls: dict[CallName, ApiCount]) -> list[tuple[CallName, ApiCount]]:
    # The program's own calls first, then Warp's, each by count.
    return sorted(
        calls.items(), key=lambda item: (item[0].inside is not None, -item[1].calls, str(item[0]))
    )


# --- JSON ----------------------------------------------------------------------------------


def _site(site: Site, root_path: str | None) -> dict:
    return {
        "module": site.module,
        "function": site.function,
        "filename": site.filename,
        "path": root_path,
        "lineno": site.lineno,
        "source": site.source_line(),
    }


def _row(row: Row, path_of) -> dict:  # type: ignore[no-untyped-def]
    item = {
        "category": row.category,
        "api": row.api,
        "count": row.count,
        "site": _site(row.site, path_of(row.site.filename)),
        "keys": [list(k) for k in row.keys],
    }
    if row.category == "host_sync":
        item["allow"] = [":".join(k) for k in row.keys]  # as one argument, unquoted
    if row.allowed_by is not None:
        item["allowed_by"] = row.allowed_by
        item["pragma"] = (
            None
            if row.pragma is None
            else {"filename": row.pragma.filename, "lineno": row.pragma.lineno}
        )
    return item


def to_json(
    findings: Findings,
    outcome: Outcome,
    *,
    argv: list[str],
    warp_version: str | None,
    path_of=lambda filename: None,  # type: ignore[no-untyped-def]
) -> dict:
    """The machine-readable report (see `schema`)."""
    scoped = findings.scoped
    policy = scoped.recording.policy
    return {
        "schema_version": SCHEMA_VERSION,
        "program": list(argv),
        "exit_status": outcome.status,
        "program_status": outcome.program_status,
        "outcome": outcome.meaning,
        "python": platform.python_version(),
        "backend": BACKEND,
        "warp_version": warp_version,
        "checks": [c for c in CATEGORIES if c in policy.checks],
        "modules": None if policy.modules is None else list(policy.modules),
        "scope": {"hot_paths": list(scoped.hot_paths), "whole_run": not scoped.hot_paths},
        "unchecked": list(findings.unchecked),
        "breach_count": findings.total,
        "breaches": [_row(r, path_of) for r in findings.breaches],
        "let_through": [_row(r, path_of) for r in findings.let_through],
        "baseline": None
        if findings.baseline is None
        else {"path": findings.baseline, "fixed": [e.to_json() for e in findings.fixed]},
        "unused_allows": list(findings.unused_allows),
        "pragmas": {
            "errors": list(findings.pragma_errors),
            "unused": [
                {"filename": p.filename, "lineno": p.lineno, "categories": list(idle)}
                for p, idle in findings.unused_pragmas
            ],
        },
        "calls": [
            {
                "api": name.name,
                "inside": name.inside,
                "calls": c.calls,
                "in_hot_paths": c.in_hot_paths,
                "breaches": scoped.api_breaches(c),
            }
            for name, c in _ordered_calls(scoped.recording.calls)
        ],
    }
