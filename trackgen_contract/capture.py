"""The ground truth: record a function into a real CUDA graph and replay it.

The guards check call *shape* on any device. `check_capturable` asks CUDA itself: it
records ``fn()`` with Warp's capture API on a CUDA device, launches the graph, and says
whether that worked, and if not, why, in plain words. It refuses to run on the CPU: Warp
(from 1.13) records CPU graphs permissively, letting readbacks, allocations and syncs
through, so a CPU capture proves nothing about CUDA.

    from trackgen_contract.capture import check_capturable

    result = check_capturable(generator.enqueue, device="cuda:0", stream=generator.stream)
    assert result.ok, result
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CaptureResult", "CaptureUnavailable", "check_capturable", "explain"]


class CaptureUnavailable(RuntimeError):
    """No CUDA device to capture on (a CPU capture would prove nothing)."""


@dataclass(frozen=True)
class CaptureResult:
    """What recording a function into a CUDA graph and replaying it gave."""

    device: str
    captured: bool  # the graph was recorded
    replayed: bool  # and launched, and the device finished it without an error
    error: str | None = None  # why not, in plain words (with Warp's or CUDA's own message)

    @property
    def ok(self) -> bool:
        """Recorded and replayed."""
        return self.captured and self.replayed

    def __str__(self) -> str:
        if self.ok:
            return f"captured and replayed on {self.device}"
        stage = "replaying" if self.captured else "capturing"
        return f"failed {stage} on {self.device}: {self.error}"


# Phrases of Warp's and CUDA's errors, and what they mean for the contract.
_MEANINGS = (
    ("synchroniz", "a host synchronization inside the capture (host_sync)"),
    ("staging buffer", "a copy that needs a host staging buffer (host_sync)"),
    ("allocat", "an allocation inside the capture, without a memory pool (allocation)"),
    ("capture already in progress", "a capture opened inside the capture (capture)"),
    ("not permitted when stream is capturing",
     "an operation a graph cannot record, such as a synchronous copy or a readback"),
    ("invalidated", "an earlier operation broke the capture"),
    ("unsupported", "an operation a graph cannot record"),
)  # fmt: skip


def explain(error: BaseException) -> str:
    """An exception raised while capturing, in plain words, with the original message(s)."""
    messages = []
    seen: BaseException | None = error
    while seen is not None and len(messages) < 4:
        messages.append(f"{type(seen).__name__}: {seen}".strip())
        seen = seen.__cause__ or seen.__context__
    text = " <- ".join(messages)
    lowered = text.lower()
    for phrase, meaning in _MEANINGS:
        if phrase in lowered:
            return f"{meaning}. {text}"
    return text


def _cuda_device(device: object):
    import warp as wp

    if _is_the_cpu(wp, device):
        raise CaptureUnavailable(
            f"device {device!r} is the CPU: Warp records CPU graphs permissively "
            "(readbacks, allocations and syncs pass), so a CPU capture proves nothing"
        )
    if not wp.is_cuda_available():
        raise CaptureUnavailable(
            "no CUDA device is available here: a CUDA graph capture needs one, and a CPU "
            "capture proves nothing (Warp records CPU graphs permissively)"
        )
    try:
        target = wp.get_device(device)
    except (RuntimeError, ValueError) as exc:
        raise CaptureUnavailable(f"cannot use device {device!r}: {exc}") from None
    if not target.is_cuda:
        raise CaptureUnavailable(
            f"device {device!r} is not a CUDA device: Warp records CPU graphs permissively "
            "(readbacks, allocations and syncs pass), so a CPU capture proves nothing"
        )
    return target


def _is_the_cpu(wp, device: object) -> bool:
    # Told before CUDA's absence: asking for the CPU is the mistake, on any machine.
    # (An exact str, or Warp's one CPU device object: no code of the caller's runs.)
    if type(device) is str:
        return device == "cpu"
    return device is wp.get_device("cpu")


def check_capturable(
    fn: Callable[[], object], *, device: object = "cuda:0", stream: object = None
) -> CaptureResult:
    """Record ``fn()`` into a CUDA graph on `device`, replay it once, and say how it went.

    `stream` is the stream to capture on (a ``wp.Stream`` of `device`); by default the
    device's current stream. Work that `fn` sends to another stream is not recorded.
    Raises `CaptureUnavailable` where there is no CUDA device.
    """
    if not callable(fn):
        raise TypeError(f"check_capturable(fn): fn must be callable, got {fn!r}")
    import warp as wp

    target = _cuda_device(device)
    name = str(target)
    try:
        with wp.ScopedDevice(target), wp.ScopedCapture(device=target, stream=stream) as capture:
            fn()
    except Exception as exc:
        return CaptureResult(name, captured=False, replayed=False, error=explain(exc))
    try:
        wp.capture_launch(capture.graph, stream=stream)
        wp.synchronize_device(target)
    except Exception as exc:
        return CaptureResult(name, captured=True, replayed=False, error=explain(exc))
    return CaptureResult(name, captured=True, replayed=True)
