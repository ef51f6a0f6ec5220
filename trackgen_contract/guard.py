"""How tests meet the contract: `HotPathGuard` and the functions that build one."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from functools import partial

from . import sanction
from .pragmas import PragmaError, accepting
from .rules import (
    ALLOWED,
    CATEGORIES,
    HINTS,
    SANCTIONED,
    VIOLATION,
    Finding,
    Key,
    Known,
    OncePerProgramCall,
    SiteVerdicts,
    Violation,
    clean_under_every_policy,
    covers,
    covers_clean,
    finding_row,
    make_policy,
)
from .tracer import CallRefused, Tracer, WarpCall, check_setting
from .tracer.critical import entry, protected

__all__ = [
    "HotPathGuard",
    "HotPathViolation",
    "hot_path_guard",
    "no_allocation",
    "no_host_sync",
    "stream_explicit",
]

DEBUG_SYNC_ENV = "TRACKGEN_DEBUG_SYNC"


class HotPathViolation(AssertionError, CallRefused):
    """A guarded hot path broke the contract."""


class _DebugSyncEnv:
    """``TRACKGEN_DEBUG_SYNC`` is out of the environment while any host-sync guard is
    active, in any thread, and comes back when the last one exits.

    Counted first, then the environment changed, outside the lock: changing
    ``os.environ`` runs Python code, so a finaliser may enter a guard there."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.guards = 0
        self.saved: str | None = None
        self.generation = 0  # a forked child starts a new one: its parent's guards are gone

    def hide(self) -> int:
        with self.lock:
            self.guards += 1
            first, generation = self.guards == 1, self.generation
        if first:
            self.saved = saved = _environment_value(DEBUG_SYNC_ENV)  # kept: see fork
            if saved is not None:  # (a pop of an absent key raises and catches KeyError)
                del os.environ[DEBUG_SYNC_ENV]
        return generation

    def restore(self, generation: int) -> None:
        with self.lock:
            if generation != self.generation or self.guards == 0:
                return
            self.guards -= 1
            last, saved = self.guards == 0, self.saved
        if last and saved is not None:
            os.environ[DEBUG_SYNC_ENV] = saved

    def reset_after_fork(self) -> None:
        self.lock = threading.Lock()
        if self.saved is not None and DEBUG_SYNC_ENV not in os.environ:
            os.environ[DEBUG_SYNC_ENV] = self.saved
        self.guards, self.saved = 0, None
        self.generation += 1


def _environment_value(name: str) -> str | None:
    """``os.environ.get(name)``. An absent variable (the usual case, read at the entry of
    every host-sync guard) is a KeyError raised and caught inside ``os.environ.get``,
    ~2 us, most of what reading it costs: the mapping's own dict of encoded names
    answers without one."""
    environ = os.environ
    if type(environ) is not os._Environ:  # replaced by the program: asked as it answers
        return environ.get(name)
    value = environ._data.get(environ.encodekey(name))
    return None if value is None else environ.decodevalue(value)


_debug_sync = _DebugSyncEnv()
os.register_at_fork(after_in_child=_debug_sync.reset_after_fork)


def _words(category: str) -> str:
    return category.replace("_", " ")


def breach_message(violation: Violation) -> str:
    """The message a strict guard raises for one breach."""
    hint = _allow_hint(violation)
    return (
        f"{_words(violation.category)} on a hot path: {violation}. {HINTS[violation.category]}"
        + (f" To let it through: {hint}." if hint else "")
    )


def _allow_hint(violation: Violation) -> str | None:
    """The ``allow=`` key of a host sync that Warp's own code made for the user's line
    (``print(arr)`` reads it in ``array.__str__``): its key names that caller, which the
    report's site does not show. None where the site's function is the key's."""
    site, key = violation.site, violation.key
    if violation.category != "host_sync" or (site.module, site.function) == key[1:]:
        return None
    return f"allow=[{tuple(key)!r}] (the call is made inside Warp, by {key[2]})"


class HotPathGuard:
    """Records (and, when strict, refuses) breaches of the hot-path contract in a block.

    Use it as a context manager; it yields itself. It can be entered again after it
    exited (its record is reset on every entry), not while it is active.

    Args:
        host_sync: check host syncs, readbacks and copies between devices.
        allocation: check Warp array allocations and native Warp objects.
        stream: check that launches and copies pass ``stream=`` and that no memset or
            ``ScopedStream`` relies on Warp's current stream.
        capture: check for graph captures and graph launches.
        modules: None (the default) checks the stream rules for every caller outside
            Warp; dotted module prefixes (``"acme"`` covers ``acme.kernels``) narrow them
            to those modules. Host syncs, allocations and captures are checked from every
            caller.
        allow: ``(api, module, function)`` keys of host syncs and readbacks to let
            through and list in `allowed`, e.g. ``("wp.array.numpy", "acme.gen",
            "Gen.generate")`` (the direct caller's qualified name).
        strict: raise `HotPathViolation` at a breaching call, before it runs, and on
            exit if any breach was recorded (so a broad ``except`` in the code under test
            cannot hide one). With ``strict=False`` every call goes through and is
            recorded.

    A line pragma that cannot be read (an unknown category) accepts nothing: the breach
    on its line is recorded, and `PragmaError` is raised when the block ends.
    """

    def __init__(
        self,
        *,
        host_sync: bool = True,
        allocation: bool = True,
        stream: bool = True,
        capture: bool = True,
        modules: Iterable[str] | str | None = None,
        allow: Iterable[Key] = (),
        strict: bool = True,
    ) -> None:
        check_setting()
        switches = {
            "host_sync": host_sync,
            "allocation": allocation,
            "stream": stream,
            "capture": capture,
        }
        for name, value in {**switches, "strict": strict}.items():
            if not isinstance(value, bool):
                raise TypeError(f"HotPathGuard({name}=...) must be True or False, got {value!r}")
        self._policy = make_policy(
            checks=[c for c in CATEGORIES if switches[c]],
            modules=modules,
            allow=allow,
            keep_arrays=not strict,
        )
        self.strict = strict
        #: Every breach recorded in the last (or current) block, in call order.
        self.violations: list[Violation] = []
        #: The keys of the breaches let through, in call order: the ``allow=`` keys that
        #: were hit, and for a breach accepted by a line pragma (``# trackgen_contract:
        #: allow host_sync``) a `pragmas.PragmaAllowed` key, equal to the plain key and
        #: carrying the breach and the pragma's line.
        self.allowed: list[Key] = []
        #: The keys of the sanctioned host syncs let through, in call order.
        self.sanctioned: list[Key] = []
        #: Why the guard may have missed calls in its last block (its hook was replaced or
        #: removed by another tool), or None. A blind guard is not `ok`.
        self.blind: str | None = None
        self._tracer: Tracer | None = None
        self._claim = threading.Lock()  # held while active: one entry at a time
        self._hidden_env: int | None = None  # the generation of the env var it hid
        self._judged = self._clean = 0  # calls judged, and answered by the clean-site path
        # Why pragmas on breaching lines cannot be read, by (file, line): raised on exit.
        self._unread: dict[tuple[str, int], str] = {}
        self._verdicts = SiteVerdicts(self._policy)
        self._once = OncePerProgramCall()  # of the block: one violation per program call

    @property
    def checks(self) -> frozenset[str]:
        """The categories this guard checks."""
        return self._policy.checks

    @property
    def modules(self) -> tuple[str, ...] | None:
        """The module prefixes the stream rules cover (None: every caller)."""
        return self._policy.modules

    @property
    def allow(self) -> frozenset[Key]:
        """The ``(api, module, function)`` keys let through."""
        return self._policy.allow

    @property
    def active(self) -> bool:
        """Whether the guard is inside its block."""
        return self._tracer is not None

    @entry
    def __enter__(self) -> HotPathGuard:
        entered: list[bool] = []
        protected(lambda: self._enter(entered), lambda: self._leave() if entered else None)
        return self

    def _enter(self, entered: list[bool]) -> None:
        if not self._claim.acquire(blocking=False):
            raise RuntimeError("this HotPathGuard is already active")
        entered.append(True)
        self.violations, self.allowed, self.sanctioned = [], [], []
        self.blind = None
        self._judged = 0
        self._unread = {}
        self._verdicts = SiteVerdicts(self._policy)  # the sites of this block
        if "host_sync" in self.checks:
            self._hidden_env = _debug_sync.hide()
        self._tracer = Tracer(
            self._on_call,
            entries=self._policy.entries,
            every_call=False,
            counts=partial(covers_clean, self._policy),
        )
        # The last step of this change (undone by _leave), so that on 3.11 little runs
        # under the thread's new profile function; it raises before anything is armed
        # when no tracer can run.
        self._tracer.start_step([])

    def _leave(self) -> None:
        # Idempotent, from any thread: also undoes an entry cut short at any step.
        tracer, self._tracer = self._tracer, None
        if tracer is not None:
            tracer.stop_step()
            self.blind = self.blind or tracer.blind
            self._clean = tracer.clean_calls
        self._verdicts.forget()  # it holds the block's code objects
        self._once.forget()  # and this, frames
        generation, self._hidden_env = self._hidden_env, None
        if generation is not None:
            _debug_sync.restore(generation)
        if self._claim.locked():
            self._claim.release()

    @entry
    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: object) -> None:
        protected(self._leave)
        __tracebackhide__ = True  # read by pytest: the user's `with` line is the last shown
        if self._unread and exc_type is None:
            raise PragmaError(next(iter(self._unread.values())))
        if self.strict and exc_type is None and not self.ok:
            # The breach was swallowed: this traceback does not show its line, the text does.
            raise HotPathViolation(self.report(with_source=True))

    @property
    def calls(self) -> int:
        """How many watched Warp calls the guard checked in its (last) block: zero means
        its block made none that its checks cover."""
        tracer = self._tracer
        return self._judged + (tracer.clean_calls if tracer is not None else self._clean)

    def _on_call(self, call: WarpCall) -> None:
        self._judged += covers(call, self._policy)
        # A clean site is handed to the core, which then skips it; a repeat call at a site
        # whose findings follow from the site alone is judged as the first one was, and
        # the tracer answers the next ones there without a WarpCall.
        findings, known = self._verdicts.judge(call)
        if known is None and not findings and clean_under_every_policy(call):
            call.learn_clean()  # later calls at this site need no WarpCall at all
        for finding in findings:
            if self._once.first(call, finding_row(finding)):
                self._record(finding)
        if known is not None:
            self._answer_repeats(call, known)

    def _record(self, finding: Finding) -> None:
        place = self._place(finding)
        if place is None:
            return
        name, item = place
        getattr(self, name).append(item)
        if name == "violations" and self.strict:
            message = breach_message(item)  # type: ignore[arg-type]
            unread = self._unread.get((item.site.filename, item.site.lineno))  # type: ignore[attr-defined]
            raise HotPathViolation(message if unread is None else f"{message} ({unread})")

    def _place(self, finding: Finding) -> tuple[str, object] | None:
        """Which record a finding goes to (by attribute name), and as what."""
        violation = finding.violation
        if finding.outcome == SANCTIONED:
            return "sanctioned", violation.key
        if finding.outcome == ALLOWED:
            return "allowed", violation.key
        if finding.outcome != VIOLATION:
            return None
        try:
            accepted = accepting(violation)  # a pragma on the breaching line
        except PragmaError as error:  # it accepts nothing; raised when the block ends
            site = violation.site
            self._unread.setdefault((site.filename, site.lineno), str(error))
            accepted = None
        if accepted is not None:
            return "allowed", accepted
        return "violations", violation

    def _answer_repeats(self, call: WarpCall, known: Known) -> None:
        # The tracer's answer only appends: a breach that a strict guard refuses is judged
        # in full each time.
        places = [p for p in map(self._place, known.findings) if p is not None]
        names, items = tuple(n for n, _ in places), tuple(i for _, i in places)
        breaches = "violations" in names
        tracer = self._tracer
        if tracer is None or not names or (self.strict and breaches):
            return
        answer = partial(self._on_repeat, names, items, known.marks, breaches)
        tracer.answer_repeats(call, known.check, answer)

    def _on_repeat(self, names: tuple[str, ...], items: tuple, marks: int, breaches: bool) -> bool:
        # Runs in the core's callback (see Tracer.answer_repeats): first what may refuse or
        # fail, then the appends, so that a call judged in full instead is recorded once.
        if (breaches and self.strict) or sanction.marked[0] != marks:
            return False  # made strict since (refused in full), or its caller marked since
        if len(names) == 1:  # one finding, the common case: no loop (it costs as much again)
            records = getattr(self, names[0])  # the lists of this block
            self._judged += 1
            records.append(items[0])
            return True
        lists = [getattr(self, name) for name in names]
        self._judged += 1
        for records, item in zip(lists, items, strict=True):
            records.append(item)
        return True

    @property
    def ok(self) -> bool:
        """No breach was recorded, and the guard saw every call."""
        return not self.violations and self.blind is None

    def of(self, category: str) -> list[Violation]:
        """The recorded breaches of one category."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; the categories are {CATEGORIES}")
        return [v for v in self.violations if v.category == category]

    def allocated(self) -> list:
        """The arrays allocated in the block (kept alive by a non-strict guard)."""
        # An allocation that a strict guard nested in this one refused never ran: Warp's
        # bare array object has no shape, and nothing was allocated.
        return [v.array for v in self.violations if hasattr(v.array, "shape")]

    def report(self, *, with_source: bool = False) -> str:
        """Every recorded breach, grouped by category, one per line (with its source line
        under it, `with_source`), then the breaches line pragmas accepted; and, for a
        blind guard, why its record is incomplete."""
        report = format_report(self.violations, with_source=with_source, allowed=self.allowed)
        if self.blind is None:
            return report
        return (
            f"{report}\nbut the guard did not see every call in its block, so it cannot "
            f"vouch for it: {self.blind}"
        )

    def raise_for_violations(self) -> None:
        """Raise `HotPathViolation` with the report if any breach was recorded (or the
        guard was blind)."""
        if not self.ok:
            raise HotPathViolation(self.report())

    def __repr__(self) -> str:
        state = "active" if self.active else "idle"
        return (
            f"HotPathGuard(checks={sorted(self.checks)}, modules={self.modules}, "
            f"strict={self.strict}, violations={len(self.violations)}, {state})"
        )


def format_report(
    violations: list[Violation], *, with_source: bool = False, allowed: Iterable[Key] = ()
) -> str:
    """Breaches grouped by category in `CATEGORIES` order, with a count and a hint each,
    one line per breach (and its source line under it, `with_source`); then, from a guard's
    `allowed`, the breaches that line pragmas accepted, each with the pragma's line."""
    accepted = [str(key) for key in allowed if getattr(key, "pragma", None) is not None]
    if not violations:
        head = "no hot-path contract breach"
        return "\n".join([head, *_accepted_lines(accepted)]) if accepted else head
    lines = []
    for category in CATEGORIES:
        found = [v for v in violations if v.category == category]
        if found:
            lines.append(f"{_words(category)} ({len(found)}). {HINTS[category]}")
            for violation in found:
                lines.append(f"  {violation}")
                source = violation.site.source_line() if with_source else ""
                if source:
                    lines.append(f"      {source}")
                hint = _allow_hint(violation)
                if hint:
                    lines.append(f"      to let it through: {hint}")
    lines += _accepted_lines(accepted)
    return "\n".join(lines)


def _accepted_lines(accepted: list[str]) -> list[str]:
    if not accepted:
        return []
    return [f"allowed by a line pragma ({len(accepted)}):", *(f"  {text}" for text in accepted)]


def hot_path_guard(
    *,
    host_sync: bool = True,
    allocation: bool = True,
    stream: bool = True,
    capture: bool = True,
    modules: Iterable[str] | str | None = None,
    allow: Iterable[Key] = (),
    strict: bool = True,
) -> HotPathGuard:
    """Every check at once (see `HotPathGuard` for the arguments)."""
    return HotPathGuard(
        host_sync=host_sync,
        allocation=allocation,
        stream=stream,
        capture=capture,
        modules=modules,
        allow=allow,
        strict=strict,
    )


def no_host_sync(*, allow: Iterable[Key] = (), strict: bool = True) -> HotPathGuard:
    """No ``wp.synchronize*``, no readback of device data, no copy between devices."""
    return HotPathGuard(
        host_sync=True, allocation=False, stream=False, capture=False, allow=allow, strict=strict
    )


def no_allocation(*, strict: bool = True) -> HotPathGuard:
    """No Warp array allocation and no native Warp object created in the block."""
    return HotPathGuard(
        host_sync=False, allocation=True, stream=False, capture=False, strict=strict
    )


def stream_explicit(
    modules: Iterable[str] | str | None = None, *, strict: bool = True
) -> HotPathGuard:
    """Every launch and copy from `modules` passes ``stream=``; they call no
    ``assign``/``zero_``/``fill_`` and enter no ``wp.ScopedStream``."""
    return HotPathGuard(
        host_sync=False,
        allocation=False,
        stream=True,
        capture=False,
        modules=modules,
        strict=strict,
    )
