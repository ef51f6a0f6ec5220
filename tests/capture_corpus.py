"""Small hot-path bodies, each with the guard's expected verdict and, where it is known, the
outcome of a real CUDA graph capture.

A snippet is built for a device from a `Buffers` (arrays made before the hot path, and the
stream the caller captures on) and returns the body to guard and to capture. `breaches` is
what the guard must report. `captures` is what a CUDA capture of the body must give (None:
not asserted, only shown). `note` says why the two disagree, for the documented exceptions
to "the guard passes it, so it captures; it fails capture, so the guard flags it".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import warp as wp
from acme.kernels import add_one

N = 64


@dataclass
class Buffers:
    """What a hot path is handed: buffers made before it, and the caller's stream."""

    device: wp.context.Device
    stream: object  # the stream being captured (None on the CPU)

    def __post_init__(self) -> None:
        self.a = wp.array(np.arange(N, dtype=np.float32), dtype=float, device=self.device)
        self.b = wp.zeros(N, dtype=float, device=self.device)
        self.host = wp.zeros(N, dtype=float, device="cpu")
        self.pinned = wp.zeros(N, dtype=float, device="cpu", pinned=self.device.is_cuda)
        self.recorded = wp.launch(add_one, dim=N, inputs=[self.a], device=self.device,
                                  record_cmd=True)  # fmt: skip

    def launch(self, **stream):
        wp.launch(add_one, dim=N, inputs=[self.a], device=self.device, **stream)


@dataclass(frozen=True)
class Snippet:
    name: str
    make: Callable[[Buffers], Callable[[], object]]
    breaches: frozenset[str]
    captures: bool | None
    note: str = ""
    cuda_only: bool = False  # needs two devices (a copy between host and device)
    mempool: bool | None = None  # memory pools on (True) or off (False) while captured


def snippet(name, make, breaches=(), captures=None, **options) -> Snippet:
    return Snippet(name, make, frozenset(breaches), captures, **options)


CORPUS: list[Snippet] = [
    # --- clean: the guard passes them, and they must capture
    snippet("launch on the caller's stream", lambda b: lambda: b.launch(stream=b.stream),
            captures=True),
    snippet("copy on the caller's stream", lambda b: lambda: wp.copy(b.b, b.a, stream=b.stream),
            captures=True),
    snippet("replay a recorded launch on the caller's stream",
            lambda b: lambda: b.recorded.launch(b.stream), captures=True),
    # --- host syncs: a capture cannot contain them
    snippet("numpy() readback", lambda b: lambda: b.a.numpy(), {"host_sync"}, captures=False),
    snippet("list() readback", lambda b: lambda: b.a.list(), {"host_sync"}, captures=False),
    snippet("readback through print(array)", lambda b: lambda: str(b.a), {"host_sync"},
            captures=False),
    snippet("wp.synchronize()", lambda b: wp.synchronize, {"host_sync"}, captures=False),
    snippet("wp.synchronize_device()", lambda b: lambda: wp.synchronize_device(b.device),
            {"host_sync"}, captures=False),
    snippet("copy into pageable host memory",
            lambda b: lambda: wp.copy(b.host, b.a, stream=b.stream), {"host_sync"},
            captures=False, cuda_only=True),
    snippet("copy into pinned host memory",
            lambda b: lambda: wp.copy(b.pinned, b.a, stream=b.stream), {"host_sync"},
            captures=None, cuda_only=True,
            note="an asynchronous copy into pinned memory can be recorded, but the host must "
                 "still wait for the graph before reading it: the guard flags every copy "
                 "between devices"),
    # --- allocations
    snippet("wp.zeros() without memory pools",
            lambda b: lambda: wp.zeros(N, dtype=float, device=b.device), {"allocation"},
            captures=False, mempool=False),
    snippet("wp.zeros() with memory pools",
            lambda b: lambda: wp.zeros(N, dtype=float, device=b.device), {"allocation"},
            captures=None, mempool=True,
            note="with a memory pool the allocation becomes a graph node and capture works, "
                 "but every replay makes the buffer anew; without one capture fails"),
    snippet("wp.HashGrid()", lambda b: lambda: wp.HashGrid(4, 4, 4, device=b.device),
            {"allocation"}),
    # --- stream
    snippet("launch without stream=", lambda b: lambda: b.launch(), {"stream"},
            note="the launch lands on Warp's current stream, outside the capture"),
    snippet("launch without stream= inside ScopedStream of the caller's stream",
            lambda b: lambda: _in_scoped_stream(b), {"stream"}, captures=None,
            note="the work does land on the captured stream, but only because of the "
                 "enclosing ScopedStream: the guard flags the pattern, not the outcome"),
    snippet("stream=None passed explicitly", lambda b: lambda: b.launch(stream=None),
            captures=None,
            note="passed, as a CPU launch context passes it, so the guard is satisfied; on "
                 "CUDA it means Warp's current stream, which need not be the captured one"),
    snippet("zero_() on Warp's current stream", lambda b: b.b.zero_, {"stream"}),
    # --- capture
    snippet("a capture inside the capture",
            lambda b: lambda: _nested_capture(b), {"capture"}),
]  # fmt: skip


def _in_scoped_stream(b: Buffers) -> None:
    with wp.ScopedStream(b.stream):
        b.launch()


def _nested_capture(b: Buffers) -> None:
    with wp.ScopedCapture(device=b.device):
        b.launch(stream=None)
