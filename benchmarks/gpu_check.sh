#!/usr/bin/env bash
# The CUDA half of the checks, for a machine with an NVIDIA GPU: installs this package, runs
# the capture cross-check (tests/test_capture.py, which must not skip here), the demo on
# cuda:0 recorded into a real graph, and the benchmark's quick run. About 3 minutes.
#
#   bash benchmarks/gpu_check.sh [OUTPUT_DIR]
#
# warp-lang must be importable, or its wheel(s) must lie in .whl/ (installed with --no-deps:
# the machine may have no network). The log goes to OUTPUT_DIR/gpu_check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-.}}
mkdir -p "$out"
log="$out/gpu_check.log"
python=${PYTHON:-python3}

{
    echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$python" -m pip install -q --no-index --no-deps --target /tmp/tc_site .whl/*.whl
        export PYTHONPATH=/tmp/tc_site${PYTHONPATH:+:$PYTHONPATH}
    fi
    "$python" -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/tc_site . ||
        { echo "cannot install trackgen_contract"; exit 2; }
    export PYTHONPATH=/tmp/tc_site${PYTHONPATH:+:$PYTHONPATH}
    "$python" -c "import warp, trackgen_contract; warp.init(); print('warp', warp.__version__, 'python', __import__('sys').version.split()[0], 'cuda devices', warp.get_cuda_device_count())" ||
        { echo "warp-lang is not importable: carry its wheel in .whl/"; exit 2; }

    echo "== capture cross-check"
    TRACKGEN_REQUIRE_CUDA=1 "$python" -m pytest tests/test_capture.py -q -s -p no:cacheprovider -p no:randomly
    status=$?

    echo "== the demo on cuda:0 (recorded into a graph, replayed)"
    "$python" -m trackgen_contract.trace examples/track_demo.py --device cuda:0 --steps 20

    echo "== benchmark (--quick)"
    "$python" benchmarks/overhead.py --quick
    exit $status
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
