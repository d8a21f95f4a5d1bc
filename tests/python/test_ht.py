"""Device tests of the HT (high-throughput) Buffer methods (pytest). Each world spawns its
processes once and runs every check in ht_harness.CHECKS; each check is reported as its own test.
Skips, saying why, without torch, without a GPU, without the compiled extension (no _C*.so in the
build folder; one that is built but fails to import is an error), or when the machine has fewer
GPUs than a world needs (the one-GPU worlds run wherever one GPU is visible)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The build's python/ folder (ANYEP_BUILD_DIR, default <repo>/build) holds anyep._C and the packages.
_BUILD_PY = os.path.join(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "python")
if os.path.isdir(_BUILD_PY):
    sys.path.insert(0, os.path.abspath(_BUILD_PY))

torch = pytest.importorskip("torch", reason="torch is not installed")

from test_ll import REASON, assert_check_passed, run_processes  # noqa: E402  (the same skip rules and process runner)

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

import ht_harness  # noqa: E402

CHECK_NAMES = [c.__name__ for c in ht_harness.CHECKS] + (["c_timeout"] if ht_harness.timeout_selected() else [])
# Processes sharing one GPU are time-sliced (slow but correct): few back-to-back iterations there.
ONE_GPU = {"ANYEP_TEST_HT_ITERS": os.environ.get("ANYEP_TEST_HT_ITERS", "4")}

# name: (processes, GPUs, environment of every rank). Rank r runs on GPU r % GPUs.
WORLDS = {
    "1proc_1gpu": (1, 1, ONE_GPU),
    "2proc_1gpu": (2, 1, ONE_GPU),
    "4proc_1gpu": (4, 1, ONE_GPU),
    "2proc_2gpu": (2, 2, {}),
}

_cache = {}


def run_world(name):
    if name not in _cache:
        world, ngpus, env = WORLDS[name]
        _cache[name] = run_processes(ht_harness.worker, world, ngpus, {**env, "ANYEP_TEST_WORLD": name})
    return _cache[name]


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_ht(world, check):
    nranks, ngpus, _ = WORLDS[world]
    visible = torch.cuda.device_count()
    if visible < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, {visible} visible")
    if check == "c_timeout" and nranks == 1:
        pytest.skip("a timeout needs a silent peer (2 or more ranks)")
    assert_check_passed(run_world(world), check, nranks)
