"""Breaches in odd places, faults in the code under test, and many threads at once.

After each scenario nothing may be left armed: no tool id, no local event, no profile
function of ours.
"""

import asyncio
import gc
import threading

import pytest
from acme import gen
from helpers import assert_nothing_left

from trackgen_contract import HotPathViolation, hot_path_guard


@pytest.fixture(autouse=True)
def _nothing_left_after():
    yield
    assert_nothing_left()


def functions(guard):
    return [v.site.function for v in guard.violations]


def test_breach_inside_a_generator(arr):
    def readings():
        for _ in range(2):
            yield gen.read_back(arr)

    with hot_path_guard(strict=False) as guard:
        list(readings())
    assert functions(guard) == ["read_back", "read_back"]


def test_generator_made_inside_the_guard_resumed_outside(arr):
    def readings():
        while True:
            yield gen.read_back(arr)

    with hot_path_guard(strict=False) as guard:
        it = readings()
        next(it)
    next(it)  # after the block: not the guard's
    assert len(guard.violations) == 1


def test_generator_made_outside_resumed_inside(arr):
    def readings():
        while True:
            yield gen.read_back(arr)

    it = readings()
    next(it)
    with hot_path_guard(strict=False) as guard:
        next(it)
    assert len(guard.violations) == 1


def test_breach_in_a_coroutine_and_an_async_generator(arr):
    async def reader():
        await asyncio.sleep(0)
        return gen.read_back(arr)

    async def stream_of_syncs():
        for _ in range(2):
            await asyncio.sleep(0)
            yield gen.sync()

    async def main():
        await reader()
        async for _ in stream_of_syncs():
            pass

    with hot_path_guard(strict=False) as guard:
        asyncio.run(main())
    assert functions(guard) == ["read_back", "sync", "sync"]


def test_breach_in_with_body_and_finally(arr):
    class Scope:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            gen.sync()

    with hot_path_guard(strict=False) as guard:
        with Scope():
            gen.read_back(arr)
        try:
            pass
        finally:
            gen.allocate(1)
    assert functions(guard) == ["read_back", "sync", "allocate"]


def test_breach_in_callbacks_from_c(arr):
    with hot_path_guard(strict=False) as guard:
        list(map(lambda _: gen.read_back(arr), [1, 2]))
        sorted([2, 1], key=lambda k: (gen.sync(), k)[1])
    assert functions(guard) == ["read_back", "read_back", "sync", "sync"]


def test_breach_in_a_finaliser():
    class Resource:
        def __del__(self):
            gen.sync()

    with hot_path_guard(strict=False) as guard:
        resource = Resource()
        del resource
        gc.collect()
    assert functions(guard) == ["sync"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_strict_breach_in_a_finaliser_still_fails_the_block():
    class Resource:
        def __del__(self):
            gen.sync()  # the exception is lost in __del__: the block reports it on exit

    with pytest.raises(HotPathViolation, match=r"host sync \(1\)"), hot_path_guard():
        resource = Resource()
        del resource
        gc.collect()


def test_exception_from_the_code_under_test(arr):
    with pytest.raises(ZeroDivisionError), hot_path_guard(strict=False) as guard:
        gen.read_back(arr)
        1 / 0  # noqa: B018
    assert len(guard.violations) == 1


def test_keyboard_interrupt_inside_the_block():
    with pytest.raises(KeyboardInterrupt), hot_path_guard():
        raise KeyboardInterrupt


def test_strict_breach_with_guards_nested_three_deep(arr):
    with hot_path_guard(strict=False) as outer:
        with pytest.raises(HotPathViolation):
            with hot_path_guard(strict=False) as middle, hot_path_guard():
                gen.read_back(arr)
    assert len(outer.violations) == len(middle.violations) == 1


def test_eight_threads_entering_and_leaving_guards_with_breaches(arr):
    cycles, failures = 25, []
    barrier = threading.Barrier(8)

    def worker(index):
        breach = gen.read_back if index % 2 else gen.sync
        expected = "read_back" if index % 2 else "sync"
        barrier.wait()
        for cycle in range(cycles):
            with hot_path_guard(strict=False) as guard:
                for _ in range(index % 3 + 1):
                    breach(arr) if index % 2 else breach()
            names = functions(guard)
            if names != [expected] * (index % 3 + 1):
                failures.append((index, cycle, names))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
