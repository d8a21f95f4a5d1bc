"""Device tests of the LL Buffer (pytest). Each world configuration spawns its processes once and
runs every check in ll_harness.CHECKS; each check is reported as its own test. Skips, saying why,
without torch, without the compiled extension, or with fewer than 2 GPUs."""
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


def _skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    try:
        import anyep._C  # noqa: F401
    except ImportError as e:
        return f"anyep._C is not built ({e}); configure with -DANYEP_PYTHON=ON"
    return None


REASON = _skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

import ll_harness  # noqa: E402

# ANYEP_TEST_LL_CHECKS (comma list) narrows the run to some checks; the others are not collected.
CHECK_NAMES = [c.__name__ for c in ll_harness.CHECKS] + (["c_timeout"] if ll_harness.timeout_selected() else [])
# name: (processes, GPUs, environment of every rank). The proxy worlds treat each process as its own
# node, so every peer goes through the CPU proxy: over the cuda-ipc transport (GPU memory, copy
# engines) or libfabric shm (host-staged buffer: this libfabric cannot register GPU memory).
WORLDS = {
    "1proc_1gpu": (1, 1, {}),
    "2proc_2gpu": (2, 2, {"ANYEP_LL_PATH": "auto"}),
    # Host waits poll events here (ll_harness.wait_gpu: blocking CUDA calls stall the copies).
    "2proc_2gpu_proxy_cudaipc": (2, 2, {"ANYEP_LL_PATH": "proxy-cuda-ipc", "ANYEP_TEST_SPIN_WAIT": "1"}),
    "2proc_2gpu_proxy_shm": (2, 2, {"ANYEP_LL_PATH": "proxy-libfabric", "ANYEP_FI_PROVIDER": "shm"}),
    "4proc_2gpu": (4, 2, {"ANYEP_LL_PATH": "auto"}),
}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_cache = {}


def run_world(name):
    if name in _cache:
        return _cache[name]
    import torch.multiprocessing as mp
    world, ngpus, env = WORLDS[name]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=ll_harness.worker, args=(r, world, ngpus, port, queue, env)) for r in range(world)]
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
    _cache[name] = results
    return results


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_ll(world, check):
    nranks, ngpus, _ = WORLDS[world]
    if torch.cuda.device_count() < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, found {torch.cuda.device_count()}")
    if check == "c_timeout" and nranks == 1:
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
