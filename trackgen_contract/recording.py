"""A whole program's Warp calls and breaches, as the command line records them.

Checks apply inside hot paths, or to the whole run when no hot path is named. A program
may mark its hot paths only as it runs (``@hot_path`` runs when its module is imported),
so every call is judged and remembered with whether it was inside a hot path, and the
scope is settled when the report is made. ``--strict`` cannot wait: it stops at a breach
inside a hot path, or anywhere while no hot path is marked yet.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from . import hotpaths
from .guard import HotPathViolation, breach_message
from .rules import ALLOWED, SANCTIONED, VIOLATION, Key, Policy, Violation, judge
from .tracer import Tracer, WarpCall


@dataclass
class ApiCount:
    """How often one watched API was called, inside hot paths, and in breach there and
    outside them."""

    calls: int = 0
    in_hot_paths: int = 0
    breaches_inside: int = 0
    breaches_outside: int = 0


@dataclass
class Recording:
    """What the command line saw: counts per API, and outcomes counted per site."""

    policy: Policy
    strict: bool = False
    apis: dict[str, ApiCount] = field(default_factory=dict)
    # (violation, inside a hot path) -> calls; likewise the keys let through
    found: Counter[tuple[Violation, bool]] = field(default_factory=Counter)
    allowed: Counter[tuple[Key, bool]] = field(default_factory=Counter)
    sanctioned: Counter[tuple[Key, bool]] = field(default_factory=Counter)

    def tracer(self) -> Tracer:
        """A tracer that records into this recording."""
        return Tracer(self.on_call)

    def on_call(self, call: WarpCall) -> None:
        count = self.apis.setdefault(call.api, ApiCount())
        count.calls += 1
        hot = call.in_hot_path
        count.in_hot_paths += hot
        for finding in judge(call, self.policy):
            violation = finding.violation
            if finding.outcome == ALLOWED:
                self.allowed[violation.key, hot] += 1
            elif finding.outcome == SANCTIONED:
                self.sanctioned[violation.key, hot] += 1
            elif finding.outcome == VIOLATION:
                self.found[violation, hot] += 1
                if hot:
                    count.breaches_inside += 1
                else:
                    count.breaches_outside += 1
                if self.strict and (hot or not hotpaths.marked()):
                    raise HotPathViolation(breach_message(violation))


@dataclass(frozen=True)
class Scoped:
    """A recording seen through its scope: inside the hot paths, or the whole run."""

    recording: Recording
    hot_paths: tuple[str, ...]  # empty: the whole run is checked

    def _counted(self, counter: Counter) -> Counter:
        whole = not self.hot_paths
        result: Counter = Counter()
        for (item, hot), n in counter.items():
            if hot or whole:
                result[item] += n
        return result

    @property
    def breaches(self) -> Counter[Violation]:
        """Breaching calls per violation (category, api, site)."""
        return self._counted(self.recording.found)

    @property
    def allowed(self) -> Counter[Key]:
        return self._counted(self.recording.allowed)

    @property
    def sanctioned(self) -> Counter[Key]:
        return self._counted(self.recording.sanctioned)

    @property
    def total(self) -> int:
        """The number of breaching calls in scope."""
        return sum(self.breaches.values())

    def api_breaches(self, count: ApiCount) -> int:
        """One API's breaching calls in scope."""
        inside = count.breaches_inside
        return inside if self.hot_paths else inside + count.breaches_outside
