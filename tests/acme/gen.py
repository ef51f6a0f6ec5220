"""Warp calls made the way a library would make them, one function per kind."""

import functools

import numpy as np
import warp as wp
from warp import launch as imported_launch

from trackgen_contract import sanction

from .kernels import add_one

LAUNCH = wp.launch  # an alias bound before any guard starts


class Holder:
    """Keeps Warp callables on an object, as launch contexts do."""

    def __init__(self, stream=None):
        self.launch = wp.launch
        self.copy = wp.copy
        self.stream = stream
        self.partial = functools.partial(wp.launch, stream=stream)


def launch_with_stream(a, stream=None):
    wp.launch(add_one, dim=a.shape[0], inputs=[a], device=a.device, stream=stream)


def launch_without_stream(a):
    wp.launch(add_one, dim=a.shape[0], inputs=[a], device=a.device)


def launch_positional_stream(a):
    wp.launch(add_one, a.shape[0], [a], [], [], [], a.device, None)


def launch_forwarding(a, **kw):
    wp.launch(add_one, a.shape[0], inputs=[a], device=a.device, **kw)


def launch_star(*args):
    wp.launch(*args)


def launch_imported(a):
    imported_launch(add_one, dim=a.shape[0], inputs=[a], device=a.device)


def launch_alias(a):
    LAUNCH(add_one, dim=a.shape[0], inputs=[a], device=a.device)


def launch_from_dict(a, table):
    table["launch"](add_one, dim=a.shape[0], inputs=[a], device=a.device)


def launch_closure(a):
    launch = wp.launch

    def inner():
        launch(add_one, dim=a.shape[0], inputs=[a], device=a.device)

    inner()


def launch_through_holder(holder, a, *, with_stream):
    if with_stream:
        holder.launch(add_one, dim=a.shape[0], inputs=[a], device=a.device, stream=holder.stream)
    else:
        holder.launch(add_one, dim=a.shape[0], inputs=[a], device=a.device)


def launch_through_partial(holder, a):
    holder.partial(add_one, dim=a.shape[0], inputs=[a], device=a.device)


def launch_tiled(a, stream_given):
    if stream_given:
        wp.launch_tiled(
            add_one, dim=[a.shape[0]], inputs=[a], block_dim=1, device=a.device, stream=None
        )
    else:
        wp.launch_tiled(add_one, dim=[a.shape[0]], inputs=[a], block_dim=1, device=a.device)


def replay(cmd, stream_given):
    if stream_given:
        cmd.launch(None)
    else:
        cmd.launch()


def copy_with_stream(dest, src):
    wp.copy(dest, src, stream=None)


def copy_without_stream(dest, src):
    wp.copy(dest, src)


def cast(src, dest):
    wp.utils.array_cast(src, dest)  # a Warp utility that launches without stream=


def read_back(a):
    return a.numpy()


def read_list(a):
    return a.list()


def read_asarray(a):
    return np.asarray(a)


def print_array(a):
    return str(a)


def sync():
    wp.synchronize()


def sync_device():
    wp.synchronize_device("cpu")


def allocate(n):
    return wp.zeros(n, dtype=float, device="cpu")


def allocate_like(a):
    return wp.empty_like(a)


def clone(a):
    return wp.clone(a)


def construct(data):
    return wp.array(data, dtype=float, device="cpu")


def views(a):
    return a[1:3], a.reshape((2, -1)), a.flatten(), a.view(wp.int32)


def memset_zero(a):
    a.zero_()


def memset_fill(a):
    a.fill_(2.0)


def memset_assign(a, b):
    a.assign(b)


def scoped_stream():
    with wp.ScopedStream(None):
        pass


def hash_grid():
    return wp.HashGrid(4, 4, 4, device="cpu")


def reserve(grid):
    grid.reserve(16)


def capture_begin():
    wp.capture_begin(device="cpu")


def swallow(fn, *args):
    """Run `fn`, hiding any exception: a broad except in the code under test."""
    try:
        fn(*args)
    except Exception:
        return "swallowed"
    return "ran"


@sanction.site("host-poll")
def poll(flag):
    return int(flag.numpy()[0])


def unsanctioned_poll(flag):
    return int(flag.numpy()[0])
