"""A batched procedural race-track generator, written to be captured into a CUDA graph.

Each call to `TrackGenerator.generate` makes `num_envs` closed tracks: random control
points around a circle, a closed Catmull-Rom spline through them evaluated in a Warp
kernel, then per-sample curvature and track width and per-track length and peak curvature.

It is written the capturable way: every buffer is allocated once, in `__init__`; every
launch and copy goes through a `LaunchContext` that names its stream; the random seed
advances on the device, so a captured graph replays fresh tracks; `generate()` reads
nothing back. `--dirty` slips in the three classic mistakes (a `.numpy()` debug print, a
`wp.zeros` per call, a launch without `stream=`).

    python -m trackgen_contract.trace examples/track_demo.py            # clean: exit 0
    python -m trackgen_contract.trace examples/track_demo.py --dirty    # 3 breaches: exit 100
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import warp as wp

from trackgen_contract import hot_path

# Keep Warp's start-up banner out of the output: log_level from Warp 1.19, quiet before it.
if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
else:
    wp.config.quiet = True


@wp.kernel
def advance_seed(state: wp.array(dtype=wp.int32)):
    state[0] = state[0] + 1


@wp.kernel
def place_control_points(
    state: wp.array(dtype=wp.int32),
    radius: float,
    jitter: float,
    ctrl: wp.array2d(dtype=wp.vec2),
):
    env, i = wp.tid()
    count = ctrl.shape[1]
    rng = wp.rand_init(state[0], env * count + i)
    angle = (float(i) + 0.4 * (wp.randf(rng) - 0.5)) * 6.2831853 / float(count)
    r = radius * (1.0 + jitter * (2.0 * wp.randf(rng) - 1.0))
    ctrl[env, i] = wp.vec2(r * wp.cos(angle), r * wp.sin(angle))


@wp.kernel
def evaluate_spline(
    ctrl: wp.array2d(dtype=wp.vec2),
    points: wp.array2d(dtype=wp.vec2),
    velocity: wp.array2d(dtype=wp.vec2),
    acceleration: wp.array2d(dtype=wp.vec2),
):
    env, j = wp.tid()
    count = ctrl.shape[1]
    u = float(j) * float(count) / float(points.shape[1])
    seg = int(wp.floor(u))
    t = u - float(seg)
    p0 = ctrl[env, (seg + count - 1) % count]
    p1 = ctrl[env, seg % count]
    p2 = ctrl[env, (seg + 1) % count]
    p3 = ctrl[env, (seg + 2) % count]
    # Catmull-Rom: p(t) = 0.5 (a + b t + c t^2 + d t^3), closed by wrapping the indices
    b = p2 - p0
    c = 2.0 * p0 - 5.0 * p1 + 4.0 * p2 - p3
    d = -p0 + 3.0 * p1 - 3.0 * p2 + p3
    points[env, j] = 0.5 * (2.0 * p1 + b * t + c * (t * t) + d * (t * t * t))
    velocity[env, j] = 0.5 * (b + 2.0 * c * t + 3.0 * d * (t * t))
    acceleration[env, j] = 0.5 * (2.0 * c + 6.0 * d * t)


@wp.kernel
def curvature_and_width(
    velocity: wp.array2d(dtype=wp.vec2),
    acceleration: wp.array2d(dtype=wp.vec2),
    max_width: float,
    curvature: wp.array2d(dtype=float),
    width: wp.array2d(dtype=float),
):
    env, j = wp.tid()
    v = velocity[env, j]
    a = acceleration[env, j]
    speed = wp.max(wp.length(v), 1.0e-6)
    k = (v[0] * a[1] - v[1] * a[0]) / (speed * speed * speed)
    curvature[env, j] = k
    width[env, j] = wp.clamp(max_width / (1.0 + 4.0 * wp.abs(k)), 0.25 * max_width, max_width)


@wp.kernel
def track_stats(
    points: wp.array2d(dtype=wp.vec2),
    curvature: wp.array2d(dtype=float),
    length: wp.array(dtype=float),
    peak_curvature: wp.array(dtype=float),
):
    env = wp.tid()
    n = points.shape[1]
    # Warp needs a typed constructor for a variable the loop below changes.
    total = float(0.0)  # noqa: UP018
    peak = float(0.0)  # noqa: UP018
    for j in range(n):
        total += wp.length(points[env, (j + 1) % n] - points[env, j])
        peak = wp.max(peak, wp.abs(curvature[env, j]))
    length[env] = total
    peak_curvature[env] = peak


class LaunchContext:
    """Issues every launch and copy on one stream, named explicitly (None on the CPU)."""

    def __init__(self, device: wp.context.Device, stream: wp.Stream | None = None) -> None:
        self.device = device
        self.stream = stream if stream is not None or device.is_cpu else device.stream

    def launch(self, kernel, dim, inputs) -> None:
        wp.launch(kernel, dim=dim, inputs=inputs, device=self.device, stream=self.stream)

    def copy(self, dest: wp.array, src: wp.array) -> None:
        wp.copy(dest, src, stream=self.stream)


class TrackGenerator:
    """Generates `num_envs` tracks per call into buffers it owns."""

    def __init__(
        self,
        num_envs: int,
        *,
        control_points: int = 10,
        samples: int = 96,
        device: str = "cpu",
        seed: int = 7,
        dirty: bool = False,
    ) -> None:
        self.device = wp.get_device(device)
        self.ctx = LaunchContext(self.device)
        self.num_envs, self.samples, self.dirty = num_envs, samples, dirty
        shape = (num_envs, samples)
        self.state = wp.array([seed], dtype=wp.int32, device=self.device)
        self.ctrl = wp.zeros((num_envs, control_points), dtype=wp.vec2, device=self.device)
        self.points = wp.zeros(shape, dtype=wp.vec2, device=self.device)
        self.velocity = wp.zeros(shape, dtype=wp.vec2, device=self.device)
        self.acceleration = wp.zeros(shape, dtype=wp.vec2, device=self.device)
        self.curvature = wp.zeros(shape, dtype=float, device=self.device)
        self.width = wp.zeros(shape, dtype=float, device=self.device)
        self.length = wp.zeros(num_envs, dtype=float, device=self.device)
        self.peak_curvature = wp.zeros(num_envs, dtype=float, device=self.device)
        self.published = wp.zeros(shape, dtype=wp.vec2, device=self.device)

    @hot_path
    def generate(self) -> None:
        """One batch of tracks, into `published` (capturable: no sync, no allocation)."""
        ctx, shape = self.ctx, (self.num_envs, self.samples)
        ctx.launch(advance_seed, 1, [self.state])
        ctx.launch(place_control_points, self.ctrl.shape, [self.state, 50.0, 0.3, self.ctrl])
        ctx.launch(
            evaluate_spline, shape, [self.ctrl, self.points, self.velocity, self.acceleration]
        )
        ctx.launch(
            curvature_and_width,
            shape,
            [self.velocity, self.acceleration, 12.0, self.curvature, self.width],
        )
        ctx.launch(
            track_stats,
            self.num_envs,
            [self.points, self.curvature, self.length, self.peak_curvature],
        )
        ctx.copy(self.published, self.points)
        if self.dirty:
            self._debug_stats()

    def _debug_stats(self) -> None:
        # The three classic mistakes, each fine in a script and fatal to a graph capture.
        print(f"debug: mean |curvature| {abs(self.curvature.numpy()).mean():.4f}")
        scratch = wp.zeros(self.num_envs, dtype=float, device=self.device)
        inputs = [self.points, self.curvature, scratch, self.peak_curvature]
        wp.launch(track_stats, dim=self.num_envs, inputs=inputs, device=self.device)


def load_kernels(device: str) -> None:
    """Compile (or load from Warp's cache) this module's kernels, saying so: the first run
    spends several seconds here, silent otherwise."""
    print(
        f"track_demo: loading the Warp kernels on {device} (the first run compiles them: "
        "several seconds; later runs load them from Warp's kernel cache)...",
        file=sys.stderr,
        flush=True,
    )
    start = time.perf_counter()
    wp.load_module(device=device)
    print(f"track_demo: kernels ready in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def run(num_envs: int, steps: int, device: str, dirty: bool) -> dict[str, float]:
    """Generate `steps` batches; read the last one back (outside the hot path)."""
    load_kernels(device)
    generator = TrackGenerator(num_envs, device=device, dirty=dirty)
    if generator.device.is_cuda and not dirty:
        with wp.ScopedCapture(device=generator.device) as capture:  # record once, replay
            generator.generate()
        for _ in range(steps):
            wp.capture_launch(capture.graph)
    else:
        for _ in range(steps):
            generator.generate()
    lengths = generator.length.numpy()
    widths = generator.width.numpy()
    return {
        "tracks": float(num_envs * steps),
        "mean_length": float(lengths.mean()),
        "mean_peak_curvature": float(generator.peak_curvature.numpy().mean()),
        "min_width": float(widths.min()),
        "max_width": float(widths.max()),
        "circle_length": 2.0 * math.pi * 50.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dirty", action="store_true", help="slip in three capture breakers")
    args = parser.parse_args(argv)
    summary = run(args.num_envs, args.steps, args.device, args.dirty)
    print(
        f"generated {summary['tracks']:.0f} tracks: mean length {summary['mean_length']:.1f} "
        f"(a circle of the same radius: {summary['circle_length']:.1f}), mean peak curvature "
        f"{summary['mean_peak_curvature']:.3f}, width {summary['min_width']:.1f}"
        f"-{summary['max_width']:.1f}"
    )


if __name__ == "__main__":
    main()
