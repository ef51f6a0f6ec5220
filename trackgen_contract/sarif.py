"""Breaches as SARIF 2.1.0, the format code-scanning services read.

One result per breach site (category, API, line), its rule the breach's category with the
category's hint as help text, its location relative to the project root (``%SRCROOT%``),
so that a pull request shows each breach on its line. What was let through is kept, as a
suppressed result: ``inSource`` for a line pragma, ``external`` for an ``allow`` key, a
sanctioned operation or a baseline entry. With a baseline, each result says whether it is
new (``baselineState``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from .project import relative_path, write_atomic
from .recording import Row
from .report import Outcome
from .rules import CATEGORIES, HINTS

SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
_ROOT = "%SRCROOT%"
_TITLES = {
    "host_sync": "Host synchronization or readback on a capturable hot path",
    "allocation": "Warp allocation on a capturable hot path",
    "stream": "Device work without an explicit stream on a capturable hot path",
    "capture": "Graph capture or graph launch inside a capturable hot path",
}
_WHY = {
    "allow": "let through by an allow key",
    "sanctioned": "a sanctioned host operation (sanction.site inside a sanction.scope)",
    "baseline": "listed in the baseline",
}


def _rule(category: str) -> dict:
    return {
        "id": category,
        "name": category.title().replace("_", ""),
        "shortDescription": {"text": _TITLES[category]},
        "fullDescription": {"text": f"{_TITLES[category]}: it would break a CUDA graph capture."},
        "help": {"text": HINTS[category]},
        "defaultConfiguration": {"level": "error"},
    }


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/")


def _file_uri(path: str) -> str:
    """``file://`` and an absolute path, percent-encoded as pathlib's ``as_uri`` writes it
    on POSIX, with no module imported: from 3.13 ``as_uri`` imports ``urllib.request`` on
    first use, and when the report is written a module in the program's directory could
    stand in for one that pulls in."""
    return "file://" + _quoted(path)


def _quoted(path: str) -> str:
    """`path` as a URI reference's path: percent-encoded past the unreserved characters
    and "/" (a space, "#" or "%" in a file name would end or break it)."""
    normal = str(PurePosixPath(path))  # as pathlib reads it: "/./" and a final "/" go
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in os.fsencode(normal))


def _location(row: Row, root: Path) -> dict:
    site = row.site
    inside = relative_path(site.filename, root)
    if inside is not None:
        artifact = {"uri": _quoted(inside), "uriBaseId": _ROOT}
    elif os.path.isabs(site.filename):
        artifact = {"uri": _file_uri(site.filename)}
    else:  # "<string>", "<stdin>": no file to point at
        artifact = {"uri": site.filename.strip("<>") or "unknown"}
    region: dict = {"startLine": max(site.lineno, 1)}
    source = site.source_line()
    if source:
        region["snippet"] = {"text": source}
    return {
        "physicalLocation": {"artifactLocation": artifact, "region": region},
        "logicalLocations": [
            {"fullyQualifiedName": f"{site.module}.{site.function}", "kind": "function"}
        ],
    }


def _fingerprint(row: Row) -> str:
    # Stable across edits that move the line: what a baseline matches on.
    site = row.site
    text = "\0".join((row.category, row.api, site.module, site.function, site.source_line()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _suppression(row: Row) -> dict:
    if row.allowed_by == "pragma" and row.pragma is not None:
        return {"kind": "inSource", "justification": f"line pragma {row.pragma}"}
    why = _WHY.get(row.allowed_by or "", row.allowed_by or "")
    if row.allowed_by == "allow":
        why += ": " + ", ".join(":".join(key) for key in row.keys)
    return {"kind": "external", "justification": why}


def _result(row: Row, root: Path, baseline_state: str | None) -> dict:
    calls = f"{row.count} call{'s' * (row.count != 1)}"
    result: dict = {
        "ruleId": row.category,
        "ruleIndex": CATEGORIES.index(row.category),
        "level": "error",
        "message": {"text": f"{row.api} from {row.site.function} ({calls})"},
        "locations": [_location(row, root)],
        "partialFingerprints": {"trackgenContractBreach/v1": _fingerprint(row)},
        "properties": {"calls": row.count, "keys": [list(k) for k in row.keys]},
    }
    if row.tests:
        result["properties"]["tests"] = list(row.tests)
    if row.allowed_by is not None:
        result["suppressions"] = [_suppression(row)]
    if baseline_state is not None:
        result["baselineState"] = baseline_state
    return result


def _invocation(outcome: Outcome) -> dict:
    # executionSuccessful is about the analysis, not its findings: a run with breaches
    # succeeded; one whose program failed partway, or whose pragmas could not be read, did
    # not check what it was asked to.
    return {
        "executionSuccessful": outcome.whole,
        "exitCode": outcome.status,
        "exitCodeDescription": outcome.meaning,
    }


def document(
    breaches: Iterable[Row],
    let_through: Iterable[Row] = (),
    *,
    root: Path,
    version: str,
    outcome: Outcome | None = None,
    with_baseline: bool = False,
) -> dict:
    """The SARIF log: `breaches` as results, `let_through` as suppressed results."""
    results = [_result(r, root, "new" if with_baseline else None) for r in breaches]
    for row in let_through:
        state = "unchanged" if with_baseline and row.allowed_by == "baseline" else None
        results.append(_result(row, root, state))
    run: dict = {
        "tool": {
            "driver": {
                "name": "trackgen_contract",
                "version": version,
                "rules": [_rule(c) for c in CATEGORIES],
            }
        },
        "originalUriBaseIds": {_ROOT: {"uri": _file_uri(str(root)) + "/"}},
        "results": results,
        "columnKind": "unicodeCodePoints",
    }
    if outcome is not None:
        run["invocations"] = [_invocation(outcome)]
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def write(path: str, log: dict) -> None:
    """Write a SARIF log atomically."""
    write_atomic(path, json.dumps(log, indent=2, ensure_ascii=False) + "\n")
