"""pytest plugin: the ``hot_path`` marker and the ``hot_path_guard`` fixture.

    @pytest.mark.hot_path(modules=("acme",))
    def test_generate_is_capturable(generator):   # fixtures set up unguarded
        generator.generate()                       # the call phase runs under a guard

A breach fails the test with the guard's report and each breach's source line. The marker
takes the options of `trackgen_contract.hot_path_guard`; with ``strict=False`` every
breach of the test is collected before it fails, instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

from .guard import HotPathGuard, HotPathViolation, format_report, hot_path_guard

_MARKER_HELP = (
    "hot_path(**options): run the test's call phase (not its fixtures) under a "
    "trackgen_contract guard and fail the test on a hot-path contract breach. Options as "
    "trackgen_contract.hot_path_guard: host_sync, allocation, stream, capture (bools), "
    "modules, allow, strict."
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)


def _guard_for(item: pytest.Item) -> HotPathGuard | None:
    marker = item.get_closest_marker("hot_path")
    if marker is None:
        return None
    if marker.args:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.hot_path takes keyword options only "
            f"(as hot_path_guard), got positional {marker.args!r}"
        )
    try:
        return HotPathGuard(**marker.kwargs)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.hot_path: {exc}") from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    guard = _guard_for(item)
    if guard is None:
        return (yield)
    with guard:  # a strict guard raises at the breaching call, or on exit if swallowed
        result = yield
    if guard.violations:  # a non-strict guard: fail with everything it collected
        raise HotPathViolation(format_report(guard.violations, with_source=True))
    return result


@pytest.fixture(name="hot_path_guard")
def guard_factory() -> Callable[..., HotPathGuard]:
    """A guard factory: `trackgen_contract.hot_path_guard`, to guard part of a test."""
    return hot_path_guard
