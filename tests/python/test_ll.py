"""Device tests of the LL Buffer (pytest). Each world configuration spawns its processes once and
runs every check in ll_harness.CHECKS; each check is reported as its own test. Skips, saying why,
without torch, without a GPU, without the compiled extension (no _C*.so in the build folder; one
that is built but fails to import is an error), or when the machine has fewer GPUs than a world
needs (the one-GPU worlds run wherever one GPU is visible)."""
import os
import socket
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The build's python/ folder (ANYEP_BUILD_DIR, default <repo>/build) holds anyep._C and the packages.
for cand in (os.path.join(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "python"),):
    if os.path.isdir(cand):
        sys.path.insert(0, os.path.abspath(cand))

torch = pytest.importorskip("torch", reason="torch is not installed")


def _built_extensions():
    """The compiled anyep._C files of the build folders on sys.path (python/anyep/_C*.so)."""
    import glob
    return [f for d in sys.path if os.path.isdir(os.path.join(d, "anyep"))
            for f in glob.glob(os.path.join(d, "anyep", "_C*.so"))]


def _skip_reason():
    # Skip only where the suite cannot run: no GPU, or the extension was never built. A built
    # extension that fails to import on a machine with torch and a GPU is a failure, not a skip.
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    try:
        import anyep._C  # noqa: F401
    except ImportError as e:
        built = _built_extensions()
        if built:
            raise ImportError(f"anyep._C is built ({', '.join(built)}) but does not import: {e}") from e
        return f"anyep._C is not built ({e}); configure with -DANYEP_PYTHON=ON"
    return None


REASON = _skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

import ll_harness  # noqa: E402

# ANYEP_TEST_LL_CHECKS (comma list) narrows the run to some checks; the others are not collected.
CHECK_NAMES = [c.__name__ for c in ll_harness.CHECKS] + (["c_timeout"] if ll_harness.timeout_selected() else [])
# Paths. The proxy ones treat each process as its own node, so every peer goes through the CPU
# proxy: over the cuda-ipc transport (GPU memory, copies through the CUDA runtime) or libfabric shm
# (host-staged buffer: this libfabric cannot register GPU memory).
DIRECT = {"ANYEP_LL_PATH": "auto"}
# Host waits poll events here (ll_harness.wait_gpu: blocking CUDA calls stall the copies).
PROXY_CUDAIPC = {"ANYEP_LL_PATH": "proxy-cuda-ipc", "ANYEP_TEST_SPIN_WAIT": "1"}
PROXY_SHM = {"ANYEP_LL_PATH": "proxy-libfabric", "ANYEP_FI_PROVIDER": "shm"}
# Chaos: the transport factory wraps every endpoint the LL runtime creates in the chaos transport
# (reordered, delayed completions and immediates); the harness checks that it did. A fixed seed,
# so a failure replays.
CHAOS = {"ANYEP_CHAOS_SEED": "9091"}
# Processes sharing one GPU are time-sliced (slow but correct): few round trips in the long check.
ONE_GPU = {"ANYEP_TEST_LL_ITERS": "8"}
# Four processes on one GPU with 4 proxy threads each would spin 16 threads on the device
# machine's 16 cores beside the ranks themselves; 2 threads each leave room.
FOUR_ON_ONE = {"ANYEP_PROXY_THREADS": "2"}

# name: (processes, GPUs, environment of every rank). Rank r runs on GPU r % GPUs.
WORLDS = {
    "1proc_1gpu": (1, 1, {}),
    "2proc_2gpu": (2, 2, DIRECT),
    "2proc_2gpu_proxy_cudaipc": (2, 2, PROXY_CUDAIPC),
    "2proc_2gpu_proxy_shm": (2, 2, PROXY_SHM),
    "4proc_2gpu": (4, 2, DIRECT),
    # One GPU shared by every rank: direct stores go through CUDA IPC between processes of the same
    # device. Chaos only changes the proxy paths (direct stores create no transport), so the
    # direct-store worlds have no chaos variant.
    "2proc_1gpu": (2, 1, {**DIRECT, **ONE_GPU}),
    "2proc_1gpu_proxy_cudaipc": (2, 1, {**PROXY_CUDAIPC, **ONE_GPU}),
    "2proc_1gpu_proxy_cudaipc_chaos": (2, 1, {**PROXY_CUDAIPC, **CHAOS, **ONE_GPU}),
    "2proc_1gpu_proxy_shm": (2, 1, {**PROXY_SHM, **ONE_GPU}),
    "2proc_1gpu_proxy_shm_chaos": (2, 1, {**PROXY_SHM, **CHAOS, **ONE_GPU}),
    "4proc_1gpu": (4, 1, {**DIRECT, **ONE_GPU}),
    "4proc_1gpu_proxy_cudaipc": (4, 1, {**PROXY_CUDAIPC, **ONE_GPU, **FOUR_ON_ONE}),
    "4proc_1gpu_proxy_cudaipc_chaos": (4, 1, {**PROXY_CUDAIPC, **CHAOS, **ONE_GPU, **FOUR_ON_ONE}),
    "4proc_1gpu_proxy_shm": (4, 1, {**PROXY_SHM, **ONE_GPU, **FOUR_ON_ONE}),
    "4proc_1gpu_proxy_shm_chaos": (4, 1, {**PROXY_SHM, **CHAOS, **ONE_GPU, **FOUR_ON_ONE}),
}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_cache = {}


def run_world(name):
    if name not in _cache:
        world, ngpus, env = WORLDS[name]
        # ANYEP_TEST_WORLD names the ranks' log lines and files.
        _cache[name] = run_processes(ll_harness.worker, world, ngpus, {**env, "ANYEP_TEST_WORLD": name})
    return _cache[name]


def run_processes(worker, world, ngpus, env):
    """Spawn `world` processes running worker(rank, world, ngpus, port, queue, env) and collect
    their (rank, results) reports: {rank: {check: "ok" | failure text}}; a rank that dies or does
    not report within ANYEP_TEST_WORLD_TIMEOUT_S gets a "setup" entry saying so (test_ht.py uses
    it too)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=worker, args=(r, world, ngpus, port, queue, env)) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.time() + float(os.environ.get("ANYEP_TEST_WORLD_TIMEOUT_S", "400"))
    try:
        # Poll: a rank that dies or hangs ends the wait with a message, not a silent stall.
        while len(results) < world and time.time() < deadline:
            try:
                rank, res = queue.get(timeout=2)
                results[rank] = res
                continue
            except Exception:
                pass
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
            if dead:
                for r in dead:
                    results[r] = {"setup": f"rank {r} exited with code {procs[r].exitcode} without reporting"}
        for r in range(world):
            results.setdefault(r, {"setup": f"rank {r} did not report within the world timeout"})
    finally:
        for p in procs:
            p.join(timeout=10 if len(results) == world else 0.1)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    return results


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_ll(world, check):
    nranks, ngpus, _ = WORLDS[world]
    visible = torch.cuda.device_count()
    if visible < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, {visible} visible")
    if check in ("c_timeout", "c_dead_rank", "c_dead_rank_clean") and nranks == 1:
        pytest.skip("a timeout needs a silent peer (2 or more ranks)")
    results = run_world(world)
    failures = []
    for rank in sorted(results):
        res = results[rank]
        if "setup" in res:
            failures.append(f"rank {rank} setup failed:\n{res['setup']}")
        elif res.get(check) != "ok":
            failures.append(f"rank {rank}:\n{res.get(check, 'did not run')}")
    if len(results) < WORLDS[world][0]:
        failures.append(f"only {len(results)} of {WORLDS[world][0]} ranks reported")
    assert not failures, "\n".join(failures)
