"""Device tests of the internode HT path (pytest): processes on one machine as emulated nodes
(ANYEP_HT_RANKS_PER_NODE), the rail exchange over the proxy on libfabric shm (the exchange
region host-staged) and on cuda-ipc (GPU memory, copies by the proxy's CUDA streams), with and
without the chaos transport reordering deliveries. Skips, saying why, as test_ht.py does."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_BUILD_PY = os.path.join(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "python")
if os.path.isdir(_BUILD_PY):
    sys.path.insert(0, os.path.abspath(_BUILD_PY))

torch = pytest.importorskip("torch", reason="torch is not installed")

from test_ll import REASON, assert_check_passed, run_processes  # noqa: E402

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

import ht_internode_harness as harness  # noqa: E402

CHECK_NAMES = [c.__name__ for c in harness.CHECKS]
SHM = {"ANYEP_HT_NET_PATH": "libfabric", "ANYEP_FI_PROVIDER": "shm", "FI_TCP_IFACE": "lo"}
CHAOS = {"ANYEP_CHAOS_SEED": "7"}
# The harness waits with blocking CUDA calls on this path too (docs/transport.md, "CUDA calls in
# the proxy": anyep's kernels are loaded up front and its copy streams are few).
CIPC = {"ANYEP_HT_NET_PATH": "cuda-ipc"}


# name: (processes, GPUs, environment). Rank r runs on GPU r % GPUs.
WORLDS = {
    "2proc_1gpu_2nodes_shm": (2, 1, {**SHM, "ANYEP_HT_RANKS_PER_NODE": "1"}),
    "2proc_1gpu_2nodes_shm_chaos": (2, 1, {**SHM, **CHAOS, "ANYEP_HT_RANKS_PER_NODE": "1"}),
    "4proc_1gpu_2x2_shm_chaos": (4, 1, {**SHM, **CHAOS, "ANYEP_HT_RANKS_PER_NODE": "2"}),
    "4proc_1gpu_2x2_shm": (4, 1, {**SHM, "ANYEP_HT_RANKS_PER_NODE": "2"}),
    "2proc_1gpu_2nodes_cipc": (2, 1, {**CIPC, "ANYEP_HT_RANKS_PER_NODE": "1"}),
    "4proc_1gpu_2x2_cipc_chaos": (4, 1, {**CIPC, **CHAOS, "ANYEP_HT_RANKS_PER_NODE": "2"}),
    "2proc_2gpu_2nodes_shm": (2, 2, {**SHM, "ANYEP_HT_RANKS_PER_NODE": "1"}),
    "4proc_2gpu_2x2_shm_chaos": (4, 2, {**SHM, **CHAOS, "ANYEP_HT_RANKS_PER_NODE": "2"}),
    "2proc_2gpu_2nodes_cipc": (2, 2, {**CIPC, "ANYEP_HT_RANKS_PER_NODE": "1"}),
}

_cache = {}


def run_world(name):
    if name not in _cache:
        world, ngpus, env = WORLDS[name]
        _cache[name] = run_processes(harness.worker, world, ngpus, {**env, "ANYEP_TEST_WORLD": name})
    return _cache[name]


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_ht_internode(world, check):
    nranks, ngpus, _ = WORLDS[world]
    visible = torch.cuda.device_count()
    if visible < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, {visible} visible")
    assert_check_passed(run_world(world), check, nranks)
