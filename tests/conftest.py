import signal

import numpy as np
import pytest
import warp as wp

# Keep Warp's start-up banner out of the output: log_level from Warp 1.19, quiet before it.
if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
else:
    wp.config.quiet = True


@pytest.fixture(scope="session", autouse=True)
def _warp_ready():
    wp.init()
    from acme import kernels

    a = wp.zeros(4, dtype=float, device="cpu")
    wp.launch(kernels.add_one, dim=4, inputs=[a], device="cpu", stream=None)  # build once


@pytest.fixture
def arr():
    return wp.array(np.arange(8, dtype=np.float32), dtype=float, device="cpu")


@pytest.fixture
def arr2():
    return wp.zeros(8, dtype=float, device="cpu")


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler for the test, as a terminal starts Python: a job a
    shell starts in the background (`pytest &`, some CI runners) has SIGINT ignored, and
    a test of what a Ctrl-C does needs it handled. The previous handler comes back."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
