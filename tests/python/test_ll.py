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
PROXY_CUDAIPC = {"ANYEP_LL_PATH": "proxy-cuda-ipc"}
PROXY_SHM = {"ANYEP_LL_PATH": "proxy-libfabric", "ANYEP_FI_PROVIDER": "shm"}
# The emulated NIC with its GPU mover: the build's provider-gpu folder holds that libemunic-fi.so.
EMUNIC_GPU_DIR = os.path.abspath(os.path.join(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build")),
                                              "emunic", "provider-gpu"))
EMUNIC_GPU_LIB = os.path.join(EMUNIC_GPU_DIR, "libemunic-fi.so")
# Its mover's kernel takes 8 SMs and cannot start while the LL kernels hold every SM (they spin
# waiting for data the mover brings): the LL kernels get 64 blocks.
PROXY_EMUNIC = {"ANYEP_LL_PATH": "proxy-libfabric", "ANYEP_FI_PROVIDER": "emunic", "FI_PROVIDER_PATH": EMUNIC_GPU_DIR,
                "ANYEP_TEST_LL_GPU_MEMORY": "1", "ANYEP_LL_SMS": "64"}
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
    # One rank per GPU on a 4-GPU machine: every peer of a rank is another GPU (NVLink).
    "4proc_4gpu": (4, 4, DIRECT),
    "4proc_4gpu_proxy_cudaipc": (4, 4, PROXY_CUDAIPC),
    "4proc_4gpu_proxy_shm": (4, 4, PROXY_SHM),
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
    # The proxy over libfabric on the emulated NIC built with its GPU mover: the LL buffer is
    # registered as GPU memory (FI_HMEM_CUDA), which ANYEP_TEST_LL_GPU_MEMORY makes the harness check.
    "2proc_1gpu_proxy_emunic_efa": (2, 1, {**PROXY_EMUNIC, "ANYEP_EMUNIC_PROFILE": "efa", **ONE_GPU}),
    "2proc_1gpu_proxy_emunic_verbs": (2, 1, {**PROXY_EMUNIC, "ANYEP_EMUNIC_PROFILE": "verbs", **ONE_GPU}),
}
# Worlds that cannot run in this build, and why (test_ll skips them saying so).
# The emulated NIC's GPU worlds run when asked for (ANYEP_TEST_EMUNIC_GPU=1): on one H200 most of
# their checks pass, but c_bad_input and the check after it do not yet, and the GPU mover's copies
# are synchronous, so a world takes minutes (docs/bench/emunic.md).
WORLD_SKIPS = {name: (f"{EMUNIC_GPU_LIB} is not built (a CUDA build with libfabric builds target emunic-gpu-fi)"
                      if not os.path.isfile(EMUNIC_GPU_LIB) else
                      "the emulated NIC's GPU worlds run with ANYEP_TEST_EMUNIC_GPU=1 (not yet passing in full)")
               for name in WORLDS if "_emunic_" in name and
               (not os.path.isfile(EMUNIC_GPU_LIB) or os.environ.get("ANYEP_TEST_EMUNIC_GPU") != "1")}


# Worlds where a process is killed: rank 1 gets SIGKILL from this process between LL calls, after
# a few round trips; rank 0's next calls must fail naming it within ANYEP_TIMEOUT_S + 10 s, or,
# on a shrink-mode buffer, complete with it masked (ll_harness.killed_rank). They run that scenario
# instead of the checks. `pytest -k killed` selects only them.
KILLED = {"ANYEP_TEST_KILL_RANK": "1", "ANYEP_TIMEOUT_S": "5"}
KILLED_WORLDS = {
    "2proc_1gpu_killed": (2, 1, {**DIRECT, **KILLED}),
    "2proc_1gpu_proxy_cudaipc_killed": (2, 1, {**PROXY_CUDAIPC, **KILLED}),
    "2proc_1gpu_proxy_shm_killed": (2, 1, {**PROXY_SHM, **KILLED}),
}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_cache = {}
_exits = {}  # world -> {rank: exit code, or what the harness had to do}


def run_world(name):
    if name not in _cache:
        world, ngpus, env = {**WORLDS, **KILLED_WORLDS}[name]
        # ANYEP_TEST_WORLD names the ranks' log lines and files.
        _exits[name] = {}
        _cache[name] = run_processes(ll_harness.worker, world, ngpus, {**env, "ANYEP_TEST_WORLD": name},
                                     exits=_exits[name])
    return _cache[name]


def run_processes(worker, world, ngpus, env, exits=None):
    """Spawn `world` processes running worker(rank, world, ngpus, port, queue, env) and collect
    their (rank, results) reports: {rank: {check: "ok" | failure text}}; a rank that dies or does
    not report within ANYEP_TEST_WORLD_TIMEOUT_S gets a "setup" entry saying so (test_ht.py uses
    it too). Every join is bounded: a rank still alive 20 s after its report is killed. `exits`
    (a dict) receives each rank's exit code, or what had to be done to it.

    With ANYEP_TEST_KILL_RANK=v in `env` (a killed-rank world) the workers get a 7th argument,
    (ready, killed): rank v sets `ready` between calls and waits; this process kills it (SIGKILL),
    reaps it, records {"killed": ...} as its result and sets `killed`. Events, not the queue: a
    process killed while its queue feeder thread holds the queue's lock would block every other
    rank's report."""
    import signal
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    victim = int(env["ANYEP_TEST_KILL_RANK"]) if "ANYEP_TEST_KILL_RANK" in env else None
    events = (ctx.Event(), ctx.Event()) if victim is not None else None
    extra = (events,) if events is not None else ()
    procs = [ctx.Process(target=worker, args=(r, world, ngpus, port, queue, env) + extra) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.time() + float(os.environ.get("ANYEP_TEST_WORLD_TIMEOUT_S", "400"))
    try:
        # Poll: a rank that dies or hangs ends the wait with a message, not a silent stall.
        while len(results) < world and time.time() < deadline:
            if events is not None and victim not in results and events[0].is_set():
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].join(timeout=15)
                code = procs[victim].exitcode
                results[victim] = {"killed": "killed by SIGKILL" if code == -signal.SIGKILL else
                                   "still running 15 s after SIGKILL" if code is None else f"exit code {code}"}
                events[1].set()
                continue
            try:
                rank, res = queue.get(timeout=2 if events is None else 0.5)
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
        for r, p in enumerate(procs):
            p.join(timeout=20 if len(results) == world else 0.1)
            code = p.exitcode
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
                code = "did not exit within 20 s of its report (killed by the test)"
            if exits is not None:
                exits[r] = code
    return results


def assert_check_passed(results, check, nranks):
    """Fail, quoting each rank's failure, unless every one of `nranks` ranks reported `check` ok
    (test_ht.py and test_ht_internode.py use it too)."""
    failures = []
    for rank in sorted(results):
        res = results[rank]
        if "setup" in res:
            failures.append(f"rank {rank} setup failed:\n{res['setup']}")
        elif res.get(check) != "ok":
            failures.append(f"rank {rank}:\n{res.get(check, 'did not run')}")
    if len(results) < nranks:
        failures.append(f"only {len(results)} of {nranks} ranks reported")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_ll(world, check):
    nranks, ngpus, _ = WORLDS[world]
    visible = torch.cuda.device_count()
    if visible < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, {visible} visible")
    if world in WORLD_SKIPS:
        pytest.skip(WORLD_SKIPS[world])
    if check in ("c_timeout", "c_dead_rank", "c_dead_rank_clean") and nranks == 1:
        pytest.skip("a timeout needs a silent peer (2 or more ranks)")
    assert_check_passed(run_world(world), check, WORLDS[world][0])


@pytest.mark.parametrize("world", list(KILLED_WORLDS))
def test_ll_killed_rank(world):
    nranks, ngpus, env = KILLED_WORLDS[world]
    visible = torch.cuda.device_count()
    if visible < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, {visible} visible")
    victim = int(env["ANYEP_TEST_KILL_RANK"])
    results = run_world(world)
    failures = []
    for rank in sorted(results):
        res = results[rank]
        if rank == victim:
            if res.get("killed") != "killed by SIGKILL":
                failures.append(f"rank {rank} (the victim): {res.get('killed') or res}")
            continue
        if "setup" in res:
            failures.append(f"rank {rank} setup failed:\n{res['setup']}")
            continue
        for check in ll_harness.KILLED_CHECKS:
            if res.get(check) != "ok":
                failures.append(f"rank {rank} {check}:\n{res.get(check, 'did not run')}")
        # The survivor ends on its own: nothing in anyep waits for the dead rank at exit.
        if _exits[world].get(rank) != 0:
            failures.append(f"rank {rank} after its report: {_exits[world].get(rank)}")
    if len(results) < nranks:
        failures.append(f"only {len(results)} of {nranks} ranks reported")
    assert not failures, "\n".join(failures)
