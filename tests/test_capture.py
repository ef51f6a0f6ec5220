"""The guard's verdicts against real CUDA graph capture.

The guard half runs everywhere. The capture half needs CUDA and is skipped without it (set
TRACKGEN_REQUIRE_CUDA=1 to make that a failure, as the GPU check script does). It asserts
that every snippet the guard passes captures, and that every snippet that fails capture is
flagged by the guard, except for the documented exceptions (a snippet with a note).
"""

import contextlib
import os

import pytest
import warp as wp
from capture_corpus import CORPUS, Buffers, Snippet

from trackgen_contract import hot_path_guard
from trackgen_contract.capture import (
    CaptureResult,
    CaptureUnavailable,
    check_capturable,
    explain,
)

HAS_CUDA = wp.is_cuda_available()
needs_cuda = pytest.mark.skipif(
    not HAS_CUDA and not os.environ.get("TRACKGEN_REQUIRE_CUDA"),
    reason="needs a CUDA device: a CPU capture proves nothing",
)
IDS = [s.name for s in CORPUS]


def verdict(snippet: Snippet, device: str) -> set[str]:
    buffers = Buffers(wp.get_device(device), stream=None if device == "cpu" else _stream(device))
    body = snippet.make(buffers)
    # Some bodies cannot run everywhere (a CPU capture before Warp 1.13): the verdict stands.
    with hot_path_guard(strict=False) as guard, contextlib.suppress(Exception):
        body()
    return {v.category for v in guard.violations}


def _stream(device):
    return wp.Stream(device)


@pytest.mark.parametrize("snippet", CORPUS, ids=IDS)
def test_guard_verdict_on_cpu(snippet):
    if snippet.cuda_only:
        pytest.skip("a copy between host and device needs a CUDA device")
    assert verdict(snippet, "cpu") == snippet.breaches


@pytest.mark.parametrize("device", ["cpu", "device"])
def test_refuses_the_cpu_by_name_on_any_machine(device):
    device = wp.get_device("cpu") if device == "device" else device
    with pytest.raises(CaptureUnavailable, match=r"is the CPU: .* proves nothing"):
        check_capturable(lambda: None, device=device)


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_refuses_without_cuda():
    with pytest.raises(CaptureUnavailable, match="no CUDA device is available"):
        check_capturable(lambda: None)


def test_needs_a_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        check_capturable(42)


def test_results_in_words():
    assert str(CaptureResult("cuda:0", True, True)) == "captured and replayed on cuda:0"
    failed = CaptureResult("cuda:0", False, False, "boom")
    assert (failed.ok, str(failed)) == (False, "failed capturing on cuda:0: boom")


def test_explain_names_the_breach():
    cause = RuntimeError("Cannot synchronize stream while graph capture is active")
    try:
        raise RuntimeError("capture failed") from cause
    except RuntimeError as exc:
        text = explain(exc)
    assert text.startswith("a host synchronization inside the capture (host_sync). ")
    assert "RuntimeError: capture failed <- RuntimeError: Cannot synchronize" in text


# --- the capture half ----------------------------------------------------------------------


def captured(snippet: Snippet, device: str = "cuda:0") -> CaptureResult:
    target = wp.get_device(device)
    pooled = wp.is_mempool_enabled(target)
    if snippet.mempool is not None:
        wp.set_mempool_enabled(target, snippet.mempool)
    try:
        buffers = Buffers(target, stream=_stream(target))
        return check_capturable(snippet.make(buffers), device=target, stream=buffers.stream)
    finally:
        wp.set_mempool_enabled(target, pooled)


@needs_cuda
@pytest.mark.parametrize("snippet", CORPUS, ids=IDS)
def test_guard_and_capture_agree(snippet):
    flagged = verdict(snippet, "cuda:0")
    assert flagged == snippet.breaches
    result = captured(snippet)
    print(f"{snippet.name}: guard {sorted(flagged) or 'clean'}; capture: {result}")
    if snippet.captures is not None:
        assert result.ok is snippet.captures, result
    if not snippet.note:
        assert result.ok or flagged, f"capture failed but the guard passed it: {result}"
        assert flagged or result.ok, f"the guard passed it but capture failed: {result}"
