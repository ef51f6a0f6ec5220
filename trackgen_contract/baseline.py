"""A baseline: the breaches a codebase already has, accepted until they are fixed.

``--write-baseline PATH`` records every breach of a run; ``--baseline PATH`` accepts the
breaches it lists and fails only on new ones, and reports the ones that went away as fixed
(rewrite the file to lock the gain in: the ratchet).

A breach is identified without line numbers, so that an edit above it keeps it matched:
by its category, API, module and function, the text of its source line, and (in a pytest
session) the test that made it. Each entry counts the source lines that share its identity
(two identical ``wp.launch(`` lines in one function make one entry of 2): a third such line
is new. The count is of lines, not calls, so a longer run does not outgrow its baseline.

The file is JSON, sorted, and the same on every machine (paths relative to the project
root):

    {"format": "trackgen_contract baseline", "version": 1,
     "entries": [{"category": "host_sync", "api": "wp.array.numpy()", "module": "acme.gen",
                  "function": "Gen.debug", "source": "print(a.numpy())", "test": null,
                  "path": "acme/gen.py", "lines": 1}]}
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .project import write_atomic
from .recording import Row
from .rules import CATEGORIES

FORMAT = "trackgen_contract baseline"
VERSION = 1


class BaselineError(Exception):
    """A baseline file that cannot be read (the message names it and what is wrong)."""


@dataclass(frozen=True)
class Identity:
    """What makes a breach the same breach across edits and machines (no line number)."""

    category: str
    api: str
    module: str
    function: str
    source: str  # the stripped text of the breaching line
    test: str | None = None  # the pytest test that made it; None on the command line

    def __str__(self) -> str:
        where = f"{self.function} ({self.module})" + (f" in {self.test}" if self.test else "")
        return f"{self.api} from {where}: {self.source}"


def identity(row: Row, test: str | None = None) -> Identity:
    """The identity of a breach row."""
    site = row.site
    return Identity(row.category, row.api, site.module, site.function, site.source_line(), test)


@dataclass(frozen=True)
class Entry:
    """One identity in a baseline, with how many source lines share it, and where."""

    identity: Identity
    lines: int
    path: str  # the file, relative to the project root (for people; not matched)

    def __str__(self) -> str:
        return f"{self.identity} [{self.path}, {self.lines} line{'s' * (self.lines != 1)}]"

    def to_json(self) -> dict:
        """The entry as the file holds it."""
        i = self.identity
        return {
            "category": i.category,
            "api": i.api,
            "module": i.module,
            "function": i.function,
            "source": i.source,
            "test": i.test,
            "path": self.path,
            "lines": self.lines,
        }


def entries(
    found: Iterable[tuple[Row, str | None]],
    path_of: Callable[[str], str] = str,
) -> list[Entry]:
    """Baseline entries for breach rows, each with the test that made it (or None)."""
    lines: dict[Identity, set[int]] = defaultdict(set)
    paths: dict[Identity, str] = {}
    for row, test in found:
        key = identity(row, test)
        lines[key].add(row.site.lineno)
        paths.setdefault(key, path_of(row.site.filename))
    return sorted((Entry(key, len(n), paths[key]) for key, n in lines.items()), key=_order)


def _order(entry: Entry) -> tuple[str, ...]:
    i = entry.identity
    return (i.test or "", i.category, i.api, i.module, i.function, i.source)


def dumps(found: list[Entry]) -> str:
    """The file's text: stable, sorted, one entry per identity."""
    ordered = sorted(found, key=_order)
    document = {"format": FORMAT, "version": VERSION, "entries": [e.to_json() for e in ordered]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write(path: str, found: list[Entry]) -> None:
    """Write a baseline file atomically."""
    write_atomic(path, dumps(found))


@dataclass(frozen=True)
class Baseline:
    """A baseline read from a file."""

    path: str
    entries: tuple[Entry, ...]

    def lines(self, key: Identity) -> int:
        """How many source lines of this identity the baseline accepts."""
        return sum(e.lines for e in self.entries if e.identity == key)

    def lists(self, key: Identity) -> bool:
        """Whether the baseline has this identity."""
        return any(e.identity == key for e in self.entries)


def load(path: str, writer: str = "--write-baseline") -> Baseline:
    """Read a baseline file; `BaselineError` naming the file when it is not one (and, for a
    missing one, the option that writes it: `writer`)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such file (write one with {writer})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{path}: not a baseline file ({exc})") from None
    except RecursionError:
        raise BaselineError(f"{path}: not a baseline file (nested too deeply)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BaselineError(f"{path}: not a trackgen_contract baseline file")
    if type(document.get("version")) is not int or document["version"] != VERSION:
        raise BaselineError(
            f"{path}: baseline version {document.get('version')!r}; this version reads {VERSION}"
        )
    if "entries" not in document:
        raise BaselineError(f"{path}: it has no 'entries'")
    entries = document["entries"]
    if not isinstance(entries, list):
        raise BaselineError(f"{path}: its 'entries' must be a list, got {_shown(entries)}")
    try:
        found = tuple(_entry(n, item) for n, item in enumerate(entries, 1))
    except ValueError as exc:
        raise BaselineError(f"{path}: {exc}") from None
    return Baseline(path, found)


_TEXTS = ("category", "api", "module", "function", "source", "path")


def _entry(n: int, item: object) -> Entry:
    """Entry `n` (from 1) of a file, as `Entry.to_json` wrote it; ValueError naming the
    entry and the field that is wrong."""
    if not isinstance(item, dict):
        raise ValueError(f"entry {n} must be an object, got {_shown(item)}")
    for key in (*_TEXTS, "test", "lines"):
        if key not in item:
            raise ValueError(f"entry {n} has no {key!r}")
    for key in _TEXTS:
        if not isinstance(item[key], str):
            raise ValueError(f"entry {n}: {key!r} must be a string, got {_shown(item[key])}")
    category, api, module, function, source, path = (item[key] for key in _TEXTS)
    test, lines = item["test"], item["lines"]
    if category not in CATEGORIES:
        raise ValueError(
            f"entry {n}: unknown category {category!r}; the categories are {', '.join(CATEGORIES)}"
        )
    if not (test is None or isinstance(test, str)):
        raise ValueError(f"entry {n}: 'test' must be a string or null, got {_shown(test)}")
    if type(lines) is not int or lines < 1:  # (not a bool: true is no count)
        raise ValueError(f"entry {n}: 'lines' must be a positive integer, got {_shown(lines)}")
    return Entry(Identity(category, api, module, function, source, test), lines, path)


def _shown(value: object) -> str:
    """A JSON value as the file spells it, cut short."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Comparison:
    """A run's breaches against a baseline: what is new, what it accepts, what was fixed."""

    new: tuple[Row, ...]
    accepted: tuple[Row, ...]
    fixed: tuple[Entry, ...]  # each with the number of its lines that no longer breach


def compare(
    found: Iterable[tuple[Row, str | None]],
    baseline: Baseline,
    *,
    tests_run: set[str] | None = None,
) -> Comparison:
    """Split breach rows (each with its test, or None) into new and accepted, and find the
    baseline entries that no longer happen.

    When more lines share an identity than the baseline accepts, all of them are reported
    as new: nothing tells which one was added. `tests_run` limits "fixed" to the tests that
    ran (a pytest run of some tests says nothing about the others).
    """
    groups: dict[Identity, list[Row]] = defaultdict(list)
    for row, test in found:
        groups[identity(row, test)].append(row)
    new: list[Row] = []
    accepted: list[Row] = []
    for key, group in groups.items():
        lines = len({row.site.lineno for row in group})
        (accepted if lines <= baseline.lines(key) else new).extend(group)
    fixed = []
    for entry in baseline.entries:
        key = entry.identity
        if tests_run is not None and key.test not in tests_run:
            continue
        seen = len({row.site.lineno for row in groups.get(key, ())})
        if seen < entry.lines:
            fixed.append(Entry(key, entry.lines - seen, entry.path))
    return Comparison(tuple(new), tuple(accepted), tuple(fixed))
