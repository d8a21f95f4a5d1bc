// anyep/src/kernels/ll/barrier.cu — the elastic barrier of clean_low_latency_buffer (shrink mode).
//
// One block; thread p % blockDim handles rank p. Rank `me` arrives at rank p by raising the word
// barrier[me] in p's buffer (ll/layout.h): a direct peer gets the new arrival count itself (release
// store at system scope; only `me` writes that word), a rank behind the proxy a SIGNAL that adds 1
// to the same word's counter (no fence: applied on arrival). Then it waits (bounded) until its own
// barrier[p] word / counter reaches the arrivals of p it has consumed plus one.
// Counts, not flags: a rank that is already at the next barrier has raised the word further, and
// the reader waits for "at least", so no arrival is lost. Masked ranks are neither arrived at nor
// waited for; a rank that does not arrive within ANYEP_TIMEOUT_S is masked (shrink mode) or
// reported (kErrBarrierTimeout). Masking a rank also takes back the arrival sent to it: a rank that
// missed the barrier (dead for a while, then unmasked by everyone) must not find it in its buffer
// at its next barrier and pass that one early. (A rank that arrives after the others masked it
// leaves its arrival behind them: the next barrier with it passes early there. Only a rank slower
// than ANYEP_TIMEOUT_S, and then unmasked, does that.)
// Like the torch.distributed barrier it replaces, it does not wait for proxy WRITEs in flight.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ll/device.cuh"
#include "kernels/ll/kernels.h"

namespace anyep::ll {
namespace {

// Tag of the barrier's SIGNALs: any valid tag (an unfenced signal leaves the fence groups alone);
// it picks the ring.
constexpr uint32_t kBarrierTag = 0;

template <typename W>
__device__ bool wait_at_least(const W* p, W want, uint64_t timeout_ns, const int32_t* mask_word) {
  const uint64_t start = port::now_ns();
  for (;;) {
    if (port::load_acquire_system(p) >= want) return true;
    if (mask_word != nullptr && port::load_acquire_device(mask_word) != 0) return false;  // masked meanwhile
    if (port::now_ns() - start > timeout_ns) return false;
  }
}

// Add `delta` (+1: arrive, -1: take an arrival back) to this rank's arrivals at rank p: a direct
// peer gets the new count, a proxied one a SIGNAL adding delta to that word's counter.
__device__ void arrive(const Common& c, int p, int delta) {
  const uint64_t off = Layout::barrier_off(c.rank);
  const int32_t sent = c.ws.barrier_sent[p] += delta;
  if (c.peers[p] != nullptr) {
    port::store_release_system(reinterpret_cast<int32_t*>(c.peers[p] + off), sent);
  } else {
    dev::push_cmd(c, kBarrierTag,
                  channel::make_signal(static_cast<uint32_t>(p), counter_of(off), delta, 0u, kBarrierTag, 0u), -1, p);
  }
}

__global__ void __launch_bounds__(kBlockThreads, 1) barrier_kernel(const ANYEP_GRID_CONSTANT Common c) {
  const int R = static_cast<int>(c.g.R);
  const bool proxy = c.proxy.rings != nullptr;
  for (int p = threadIdx.x; p < R; p += blockDim.x) {
    if (p == c.rank || dev::rank_masked(c, p)) continue;
    if (c.peers[p] != nullptr || proxy) {
      arrive(c, p, 1);
    } else {
      dev::report(c.err, kErrNoPeer, c.rank, -1, p, 0);
    }
  }
  for (int p = threadIdx.x; p < R; p += blockDim.x) {
    if (p == c.rank || dev::rank_masked(c, p)) continue;
    const bool direct = c.peers[p] != nullptr;
    if (!direct && !proxy) continue;  // reported above
    const int32_t want = c.ws.barrier_seen[p] + 1;
    const uint64_t off = Layout::barrier_off(p);
    const int32_t* mask_word = c.mask != nullptr ? c.mask + p : nullptr;
    const bool arrived =
        direct ? wait_at_least(reinterpret_cast<const int32_t*>(c.local + off), want, c.timeout_ns, mask_word)
               : wait_at_least(reinterpret_cast<const uint64_t*>(c.proxy.counters + counter_of(off)),
                               static_cast<uint64_t>(want), c.timeout_ns, mask_word);
    if (arrived) {
      c.ws.barrier_seen[p] = want;
    } else if (c.mask != nullptr) {
      atomicExch(c.mask + p, 1);  // shrink mode: go on without it, as the LL calls do
      arrive(c, p, -1);           // and take back the arrival it did not see
    } else {
      dev::report(c.err, kErrBarrierTimeout, c.rank, -1, p, want);
    }
  }
}

}  // namespace

cudaError_t launch_barrier(const Common& c, cudaStream_t stream) {
  barrier_kernel<<<1, kBlockThreads, 0, stream>>>(c);
  return cudaGetLastError();
}

cudaError_t preload_barrier() { return load_functions(barrier_kernel); }

}  // namespace anyep::ll
