"""A whole program's Warp calls and breaches, as the command line records them.

Checks apply inside hot paths, or to the whole run when no hot path is named. A program
may mark its hot paths only as it runs (``@hot_path`` runs when its module is imported),
so every call is judged and remembered with whether it was inside a hot path, and the
scope is settled when the report is made. (While no hot path is marked, a repeat breach
at a site whose findings follow from the site alone is counted without judging it again.)
``--strict`` cannot wait: it stops at a breach inside a hot path, or anywhere while no hot
path is marked yet.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from . import hotpaths, sanction
from .guard import HotPathViolation, breach_message
from .pragmas import Pragma, PragmaError, accepting
from .registry import ALLOC, ALLOCATOR, NATIVE
from .rules import (
    ALLOWED,
    CATEGORIES,
    SANCTIONED,
    Finding,
    Key,
    Known,
    OncePerProgramCall,
    Policy,
    SiteVerdicts,
    Violation,
    covers,
    finding_row,
)
from .sites import Site
from .tracer import Tracer, WarpCall


@dataclass(frozen=True)
class CallName:
    """A row of the "Warp calls seen" table: what the program called (``wp.zeros``, not
    Warp's allocation chokepoint), and, for a call that Warp made itself, the Warp function
    the program called that made it (`inside`)."""

    name: str
    inside: str | None = None

    def __str__(self) -> str:
        return self.name if self.inside is None else f"{self.name} (inside {self.inside})"


def call_name(call: WarpCall) -> CallName:
    """How the table names a watched call."""
    if call.direct:
        return CallName(call.api)
    inside = call.via if call.within else None
    if call.op == ALLOC:
        # Warp's allocation chokepoint: named by the call that made it, as the breach is
        # ("wp.zeros", not "wp.array._init_new"), inside the program's call where Warp
        # made it ("wp.array (inside wp.Volume.load_from_numpy)").
        return CallName(call.made_by, inside)
    if call.op in (ALLOCATOR, NATIVE) and inside is None:
        # The allocation that the program's own call made: named by that call.
        return CallName(call.via)
    return CallName(call.api, call.via)


@dataclass
class ApiCount:
    """How often one watched API was called, inside hot paths, and in breach there and
    outside them."""

    calls: int = 0
    in_hot_paths: int = 0
    breaches_inside: int = 0
    breaches_outside: int = 0


@dataclass(frozen=True)
class Row:
    """Calls of one API at one site that breached the contract (or were let through).

    `keys` are the ``(api, module, function)`` keys the calls were counted against (for a
    host sync, the forms ``--allow`` and ``allow=`` take); `allowed_by` says what let them
    through, None for a breach: ``"allow"``, ``"pragma"`` (then `pragma` is the comment),
    ``"sanctioned"`` or ``"baseline"``. `tests` names the pytest tests that made them.
    """

    category: str
    api: str
    site: Site
    count: int
    keys: tuple[Key, ...]
    allowed_by: str | None = None
    pragma: Pragma | None = None
    tests: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.count}x {self.api} from {self.site}"


def rows(
    counted: Iterable[tuple[Violation, int]],
    *,
    allowed_by: str | None = None,
    pragma: Callable[[Violation], Pragma | None] = lambda v: None,
) -> list[Row]:
    """One row per (category, api, site), most calls first within each category."""
    merged: dict[tuple[str, str, Site], tuple[int, set[Key], Pragma | None]] = {}
    for violation, n in counted:
        where = (violation.category, violation.api, violation.site)
        count, keys, found = merged.get(where, (0, set(), None))
        keys.add(violation.key)
        merged[where] = (count + n, keys, found or pragma(violation))
    order = {c: i for i, c in enumerate(CATEGORIES)}
    made = [
        Row(c, api, site, n, tuple(sorted(keys)), allowed_by, found)
        for (c, api, site), (n, keys, found) in merged.items()
    ]
    return sorted(made, key=lambda r: (order[r.category], -r.count, str(r.site), r.api))


# Where a finding was counted: a counter of the recording and its key.
_Tally = tuple[Counter, tuple]


@dataclass
class Recording:
    """What the command line saw: counts per API, and outcomes counted per site.

    `tolerated` says which breaches ``--strict`` lets run on (those a baseline lists).
    """

    policy: Policy
    strict: bool = False
    tolerated: Callable[[Violation], bool] = lambda violation: False
    calls: dict[CallName, ApiCount] = field(default_factory=dict)
    # (violation, inside a hot path) -> calls; likewise what was let through
    found: Counter[tuple[Violation, bool]] = field(default_factory=Counter)
    allowed: Counter[tuple[Violation, bool]] = field(default_factory=Counter)
    sanctioned: Counter[tuple[Violation, bool]] = field(default_factory=Counter)
    by_pragma: Counter[tuple[Violation, Pragma, bool]] = field(default_factory=Counter)
    pragma_errors: dict[str, None] = field(default_factory=dict)  # messages, in order
    #: Watched calls one of the checks looks at (see `rules.covers`).
    checked: int = 0
    # what marks a hot path -> watched calls made inside it that a check looks at
    hot_calls: Counter[hotpaths.Key] = field(default_factory=Counter)
    #: The violation ``--strict`` raised to stop the program, if it did.
    stopped_by: HotPathViolation | None = None
    #: Why the tracer missed calls (its hook replaced by the program), or None.
    blind: str | None = None
    verdicts: SiteVerdicts = field(init=False, repr=False)
    _tracer: Tracer | None = field(default=None, init=False, repr=False)
    # One program call gives one call in the table's row named by it, and one finding.
    _once: OncePerProgramCall = field(default_factory=OncePerProgramCall, repr=False)

    def __post_init__(self) -> None:
        self.verdicts = SiteVerdicts(self.policy)

    def tracer(self) -> Tracer:
        """A tracer that records into this recording."""
        self._tracer = Tracer(self.on_call)
        return self._tracer

    def stop(self) -> None:
        """Stop the tracer, keeping why it was blind (if it was, in this run or before)."""
        tracer = self._tracer
        if tracer is not None:
            tracer.stop()  # idempotent: also undoes a start cut short
            self.blind = self.blind or tracer.blind

    def restart(self) -> None:
        """Stop and start the tracer again."""
        if self._tracer is not None and self._tracer.active:
            self.stop()
            self._tracer.start()

    def on_call(self, call: WarpCall) -> None:
        """Count one watched call and record what the rules make of it."""
        name = call_name(call)
        count = self.calls.setdefault(name, ApiCount())
        # A row named by the program's call counts that call once, however many calls
        # Warp makes for it (the two allocations of wp.zeros(n, requires_grad=True)).
        new = name.inside is not None or self._once.first(call, name)
        count.calls += new
        covered = covers(call, self.policy)
        self.checked += covered
        hot = call.in_hot_path
        if hot:
            count.in_hot_paths += new
            if covered:
                self.hot_calls.update(hotpaths.keys_on_stack(sys._getframe()))
        findings, known = self.verdicts.judge(call)
        once = self._once
        tallies = [
            self._record(finding, hot, count)
            for finding in findings
            if once.first(call, finding_row(finding))
        ]
        if known is not None and not self.strict and call.direct:
            self._answer_repeats(call, known, count, tallies, covered)

    def _record(self, finding: Finding, hot: bool, count: ApiCount) -> _Tally:
        """Count one finding; where it was counted (a repeat is counted there too)."""
        violation = finding.violation
        if finding.outcome == ALLOWED:
            tally: _Tally = (self.allowed, (violation, hot))
        elif finding.outcome == SANCTIONED:
            tally = (self.sanctioned, (violation, hot))
        else:
            tally = self._breach(violation, hot, count)
        counter, key = tally
        counter[key] += 1
        if counter is self.found:
            self._stop_if_strict(violation, hot)
        return tally

    def _breach(self, violation: Violation, hot: bool, count: ApiCount) -> _Tally:
        """Where a breach is counted: as its line's pragma accepted, or as found."""
        try:
            accepted = accepting(violation)
        except PragmaError as exc:  # reported with the run; the breach stays a breach
            self.pragma_errors[str(exc)] = None
            accepted = None
        if accepted is not None:
            return self.by_pragma, (violation, accepted.pragma, hot)
        if hot:
            count.breaches_inside += 1
        else:
            count.breaches_outside += 1
        return self.found, (violation, hot)

    def _stop_if_strict(self, violation: Violation, hot: bool) -> None:
        if self.strict and (hot or not hotpaths.any_marked()) and not self.tolerated(violation):
            self.stopped_by = HotPathViolation(breach_message(violation))
            raise self.stopped_by

    def _answer_repeats(
        self, call: WarpCall, known: Known, count: ApiCount, tallies: list[_Tally], covered: bool
    ) -> None:
        # A repeat of a direct call whose findings follow from its site (see
        # rules.SiteVerdicts) is counted as its first call was, by the tracer's answer: no
        # WarpCall, no stack walk. While no hot path is marked (else the stack decides
        # whether it is in one) and no function was marked sanctioned since.
        tracer = self._tracer
        if tracer is None or hotpaths.any_marked():
            return
        breaches = sum(counter is self.found for counter, _ in tallies)
        marks = known.marks

        def answer() -> bool:
            if hotpaths.any_marked() or sanction.marked[0] != marks:
                return False  # judged in full
            count.calls += 1
            self.checked += covered
            count.breaches_outside += breaches
            for counter, key in tallies:
                counter[key] += 1
            return True

        tracer.answer_repeats(call, known.check, answer)


@dataclass(frozen=True)
class Scoped:
    """A recording seen through its scope: inside the hot paths, or the whole run."""

    recording: Recording
    hot_paths: Mapping[str, tuple[hotpaths.Key, ...]]  # as hotpaths.marked(); empty: the whole run

    def _counted(self, counter: Counter) -> Counter:
        whole = not self.hot_paths
        result: Counter = Counter()
        for (*item, hot), n in counter.items():
            if hot or whole:
                result[item[0] if len(item) == 1 else tuple(item)] += n
        return result

    @property
    def breaches(self) -> Counter[Violation]:
        """Breaching calls per violation (category, api, site, key)."""
        return self._counted(self.recording.found)

    def breach_rows(self) -> list[Row]:
        """The breaches in scope, one row per (category, api, site)."""
        return rows(self.breaches.items())

    def allowed_rows(self) -> list[Row]:
        """What ``allow=`` keys and line pragmas let through in scope."""
        by_pragma = self._counted(self.recording.by_pragma)
        pragma_of = {v: p for (v, p) in by_pragma}
        pragma_rows = rows(
            ((v, n) for (v, _), n in by_pragma.items()), allowed_by="pragma", pragma=pragma_of.get
        )
        return rows(self._counted(self.recording.allowed).items(), allowed_by="allow") + (
            pragma_rows
        )

    def sanctioned_rows(self) -> list[Row]:
        """The sanctioned host operations in scope."""
        return rows(self._counted(self.recording.sanctioned).items(), allowed_by="sanctioned")

    @property
    def total(self) -> int:
        """The number of breaching calls in scope."""
        return sum(self.breaches.values())

    def api_breaches(self, count: ApiCount) -> int:
        """One API's breaching calls in scope."""
        inside = count.breaches_inside
        return inside if self.hot_paths else inside + count.breaches_outside

    def unchecked(self) -> list[str]:
        """Why nothing (or a part) was checked: empty when every part in scope was."""
        blind = self.recording.blind
        reasons = []
        if blind:
            reasons.append(f"from the point where {blind}, Warp calls may have gone unseen")
        if not self.hot_paths:
            if not self.recording.calls and not blind:
                reasons.append("the program made no watched Warp call, so nothing was checked")
            elif not self.recording.checked and not blind:
                reasons.append(
                    "none of the program's watched Warp calls is one the checks look at "
                    "(--checks; for the stream rules, --modules), so nothing was checked"
                )
            return reasons
        unimported = hotpaths.never_imported()
        return reasons + [
            f"hot path {name}: no Warp call that the checks look at was made inside it, so "
            "nothing was checked there ("
            + (
                f"the program never imported {unimported[name]!r}"
                if name in unimported
                else "it never ran, or it calls none: see --checks and, for the stream "
                "rules, --modules; a @wp.kernel or @wp.func never runs as Python: name "
                "the function that launches it"
            )
            + ")"
            for name, keys in self.hot_paths.items()
            if not hotpaths.ran(keys, self.recording.hot_calls)
        ]

    def pragma_uses(self) -> set[tuple[str, int, str]]:
        """``(filename, lineno, category)`` of every pragma that accepted a breach in scope."""
        used = self._counted(self.recording.by_pragma)
        return {(p.filename, p.lineno, v.category) for (v, p) in used}
