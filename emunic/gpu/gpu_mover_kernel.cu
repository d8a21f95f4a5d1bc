// emunic/gpu/gpu_mover_kernel.cu — the mover kernel. One block per SM (the host reserves shared memory
// so that no second block fits). The first block to start gives its warp 0 the front role: it
// reads the host's tail, publishes it to the workers in device memory and decides when to leave.
// Every other warp is a worker: it claims a run of posted descriptors with one compare-and-swap,
// copies them, fences at system scope, then writes their completions and marks their slots read.
// Descriptors over the split size go to a small job table whose chunks every worker helps copy.
#include "common/portability.h"
#include "gpu_mover_kernel.h"

namespace anyep_emunic::gpu {
namespace {

using port::kWarpSize;
using port::Order;
using port::Scope;

constexpr int kUnroll = 8;  // 16-byte vectors in flight per lane: 4 KiB per warp

struct Desc {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t completion = 0;
  uint32_t bytes = 0;
  uint32_t value = 0;
};

ANYEP_DEVICE ANYEP_INLINE uint64_t bcast(uint64_t v, int lane) {
  return port::warp_broadcast(port::full_lane_mask(), v, lane);
}

// Bytes one lane at a time (unaligned heads and tails, or buffers that disagree modulo 16).
ANYEP_DEVICE ANYEP_INLINE void copy_bytes(uint64_t src, uint64_t dst, uint64_t n, int lane) {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
  uint8_t* d = reinterpret_cast<uint8_t*>(dst);
  for (uint64_t i = static_cast<uint64_t>(lane); i < n; i += kWarpSize) d[i] = port::load_l2(s + i);
}

// The warp copies n bytes. Sources are read from L2 (load_l2): the kernel runs long, and a buffer
// the user rewrote between two posts must not come from a stale L1 line.
ANYEP_DEVICE void warp_copy(uint64_t src, uint64_t dst, uint64_t n, int lane) {
  if (n == 0) return;
  if (((src ^ dst) & 15) != 0) {
    copy_bytes(src, dst, n, lane);
    return;
  }
  uint64_t head = (16 - (src & 15)) & 15;
  if (head > n) head = n;
  copy_bytes(src, dst, head, lane);
  src += head;
  dst += head;
  n -= head;
  const uint64_t nv = n / 16;
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  // Every load of a round is issued before its stores, the last (partial) round too: a 7.4 KiB
  // message is two rounds, not one round and seven dependent load-store pairs.
  for (uint64_t i = static_cast<uint64_t>(lane); i < nv; i += kUnroll * kWarpSize) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kWarpSize < nv) v[u] = port::load_l2(s + i + u * kWarpSize);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kWarpSize < nv) port::store16(d + i + u * kWarpSize, v[u]);
  }
  copy_bytes(src + nv * 16, dst + nv * 16, n - nv * 16, lane);
}

// The completion store itself is relaxed: the fence before it is what orders the data (the test's
// no-fence variant removes exactly that fence, and nothing else orders the two).
ANYEP_DEVICE ANYEP_INLINE void complete(uint64_t completion, uint32_t value) {
  const uint64_t op = completion & kCompletionOpMask;
  const uint64_t a = completion & ~kCompletionOpMask;
  if (op == static_cast<uint64_t>(CompletionOp::kStore32)) {
    port::atomic_store<Order::relaxed, Scope::system>(reinterpret_cast<uint32_t*>(a), value);
  } else if (op == static_cast<uint64_t>(CompletionOp::kAdd32)) {
    port::atomic_add<Order::relaxed, Scope::system>(reinterpret_cast<uint32_t*>(a), value);
  } else if (op == static_cast<uint64_t>(CompletionOp::kAdd64)) {
    port::atomic_add<Order::relaxed, Scope::system>(reinterpret_cast<uint64_t*>(a), static_cast<uint64_t>(value));
  }
}

// Takes one unclaimed chunk of any job and copies it; the warp that finishes a job's last chunk
// writes its completion and frees the entry. Returns false when no job had a chunk left.
template <bool kFence>
ANYEP_DEVICE bool help_jobs(const MoverParams& p, int lane) {
  MoverDeviceState* s = p.dev;
  int got = -1;
  uint64_t chunk = 0;
  if (lane == 0 && port::atomic_load<Order::relaxed, Scope::device>(&s->jobs_open.v) != 0) {
    for (int e = 0; e < kMoverJobs && got < 0; ++e) {
      MoverJob& j = s->jobs[e];
      uint64_t c = port::atomic_load<Order::relaxed, Scope::device>(&j.claim);
      while (job_claim_next(c) < job_claim_chunks(c)) {
        const uint64_t prev = atomicCAS(reinterpret_cast<unsigned long long*>(&j.claim),
                                        static_cast<unsigned long long>(c), static_cast<unsigned long long>(c + 1));
        if (prev == c) {
          got = e;
          chunk = job_claim_next(c);
          break;
        }
        c = prev;
      }
    }
    if (got >= 0) port::fence_device();  // acquire: the fields written before the claim's release
  }
  got = static_cast<int>(bcast(static_cast<uint64_t>(static_cast<int64_t>(got)), 0));
  if (got < 0) return false;
  MoverJob& j = s->jobs[got];
  uint64_t src = 0, dst = 0, bytes = 0;
  if (lane == 0) {
    src = port::load_l2(&j.src);
    dst = port::load_l2(&j.dst);
    bytes = port::load_l2(&j.bytes);
  }
  chunk = bcast(chunk, 0);
  src = bcast(src, 0);
  dst = bcast(dst, 0);
  bytes = bcast(bytes, 0);
  const uint64_t off = chunk * p.chunk_bytes;
  const uint64_t len = bytes - off < p.chunk_bytes ? bytes - off : p.chunk_bytes;
  warp_copy(src + off, dst + off, len, lane);
  port::warp_sync();
  if constexpr (kFence) port::fence_system();
  if (lane == 0) {
    const uint64_t chunks = (bytes + p.chunk_bytes - 1) / p.chunk_bytes;
    const uint32_t before = port::atomic_add_acq_rel_device(&j.done, 1u);
    if (before + 1 == chunks) {
      if constexpr (kFence) port::fence_system();  // every chunk's data (acquired above) before the completion
      complete(port::load_l2(&j.completion), port::load_l2(&j.value));
      port::atomic_add<Order::relaxed, Scope::device>(&s->completed.v, uint64_t{1});
      port::atomic_add<Order::relaxed, Scope::device>(&s->jobs_open.v, ~uint64_t{0});  // minus one
      port::store_release_device(&j.busy, 0u);
    }
  }
  port::warp_sync();
  return true;
}

// Puts a large descriptor into a free job entry (helping other jobs while none is free).
template <bool kFence>
ANYEP_DEVICE void start_job(const MoverParams& p, const Desc& d, int lane) {
  const uint64_t chunks = (static_cast<uint64_t>(d.bytes) + p.chunk_bytes - 1) / p.chunk_bytes;
  while (true) {
    int got = -1;
    if (lane == 0) {
      for (int e = 0; e < kMoverJobs; ++e) {
        MoverJob& j = p.dev->jobs[e];
        if (atomicCAS(&j.busy, 0u, 1u) != 0u) continue;
        port::fence_device();  // acquire: the last user of the entry is done with its fields
        const uint64_t gen = job_claim_generation(port::atomic_load<Order::relaxed, Scope::device>(&j.claim)) + 1;
        j.src = d.src;
        j.dst = d.dst;
        j.completion = d.completion;
        j.bytes = d.bytes;
        j.value = d.value;
        port::atomic_store<Order::relaxed, Scope::device>(&j.done, 0u);
        // Counted before it can be claimed: a helper that sees the claim also finds the count
        // non-zero (and this warp, which keeps helping until every chunk is taken, sees its own).
        port::atomic_add<Order::relaxed, Scope::device>(&p.dev->jobs_open.v, uint64_t{1});
        port::store_release_device(&j.claim, job_claim(gen, chunks, 0));
        got = e;
        break;
      }
    }
    if (static_cast<int64_t>(bcast(static_cast<uint64_t>(static_cast<int64_t>(got)), 0)) >= 0) return;
    help_jobs<kFence>(p, lane);
  }
}

// Copies descriptors [t, t + n) (n <= warp size; lane i reads slot t + i), then fences once for all
// of them and writes their completions.
template <bool kFence>
ANYEP_DEVICE void run_batch(const MoverParams& p, uint64_t t, uint32_t n, int lane) {
  Desc d;
  const bool mine = static_cast<uint32_t>(lane) < n;
  const uint64_t slot = (t + static_cast<uint64_t>(lane)) & p.ring_mask;
  if (mine) {
    const uint4* q = reinterpret_cast<const uint4*>(p.ring + slot);
    const uint4 a = port::load_uncached(q), b = port::load_uncached(q + 1);
    d.src = (static_cast<uint64_t>(a.y) << 32) | a.x;
    d.dst = (static_cast<uint64_t>(a.w) << 32) | a.z;
    d.completion = (static_cast<uint64_t>(b.y) << 32) | b.x;
    d.bytes = b.z;
    d.value = b.w;
  }
  const bool big = mine && d.bytes > p.split_bytes;
  for (uint32_t k = 0; k < n; ++k) {
    const int from = static_cast<int>(k);
    const uint64_t bytes = bcast(d.bytes, from);
    if (bytes <= p.split_bytes) {
      warp_copy(bcast(d.src, from), bcast(d.dst, from), bytes, lane);
    } else {
      Desc b;
      b.src = bcast(d.src, from);
      b.dst = bcast(d.dst, from);
      b.completion = bcast(d.completion, from);
      b.bytes = static_cast<uint32_t>(bytes);
      b.value = static_cast<uint32_t>(bcast(d.value, from));
      start_job<kFence>(p, b, lane);
    }
  }
  port::warp_sync();
  if constexpr (kFence) port::fence_system();
  if (mine) {
    if (!big && d.completion != 0) complete(d.completion, d.value);
    // The fence above also orders this lane's reads of the slot before the mark.
    port::atomic_store<Order::relaxed, Scope::system>(&p.ring_rw[slot].bytes, kSlotFree);
  }
  const uint64_t small = port::popcount64(port::warp_ballot(mine && !big));
  if (lane == 0 && small != 0) port::atomic_add<Order::relaxed, Scope::device>(&p.dev->completed.v, small);
  port::warp_sync();
}

template <bool kFence>
ANYEP_DEVICE void worker_loop(const MoverParams& p, int lane, uint64_t workers) {
  MoverDeviceState* s = p.dev;
  uint32_t quiet = 0;
  while (true) {
    if (help_jobs<kFence>(p, lane)) {
      quiet = 0;
      continue;
    }
    uint64_t t = 0, a = 0, n = 0, got = 0, leave = 0;
    if (lane == 0) {
      a = port::load_acquire_device(&s->avail.v);
      t = port::atomic_load<Order::relaxed, Scope::device>(&s->ticket.v);
      if (t < a) {
        // Share a backlog among the warps; claim at least one, at most a warp's worth.
        n = (a - t) / workers;
        n = n < 1 ? 1 : (n > static_cast<uint64_t>(kWarpSize) ? static_cast<uint64_t>(kWarpSize) : n);
        got = atomicCAS(reinterpret_cast<unsigned long long*>(&s->ticket.v), static_cast<unsigned long long>(t),
                        static_cast<unsigned long long>(t + n)) == t;
      } else {
        leave = port::load_acquire_device(&s->leave.v);
      }
    }
    got = bcast(got, 0);
    if (got) {
      port::warp_sync();  // lane 0's acquire of avail covers every lane's reads of the slots
      run_batch<kFence>(p, bcast(t, 0), static_cast<uint32_t>(bcast(n, 0)), lane);
      quiet = 0;
      continue;
    }
    if (bcast(t < a, 0)) continue;  // lost the race for those slots: look again at once
    if (bcast(leave, 0)) return;
    // Nothing posted: back off (up to about half a microsecond), so hundreds of idle warps do not
    // crowd the L2 slice that holds the ticket with polls.
    for (uint32_t k = 0; k < quiet; ++k) port::spin_pause();
    if (quiet < 16) ++quiet;
  }
}

// Lane 0 of the front warp. Leaves (telling the workers to) once no work was posted or waiting for
// a claim for idle_ns. Exit protocol against a post landing at that moment: say EXITING, fence,
// read the tail again; the host stores the tail, fences, reads the state. One of the two sees the
// other: either this loop sees the new tail and carries on, or the host sees EXITING and launches
// again (the new launch runs after this one on the same stream).
ANYEP_DEVICE void front_loop(const MoverParams& p) {
  MoverHostControl* h = p.host;
  MoverDeviceState* s = p.dev;
  port::atomic_store<Order::relaxed, Scope::system>(&h->state.v, mover_state(p.generation, kPhaseRunning));
  port::fence_system();
  uint64_t seen = port::load_acquire_device(&s->avail.v);
  uint64_t mirrored = ~uint64_t{0};
  uint64_t last_work = port::now_ns();
  while (true) {
    const uint64_t tail = port::load_acquire_system(&h->tail.v);
    const uint64_t now = port::now_ns();
    if (tail != seen) {
      port::store_release_device(&s->avail.v, tail);
      seen = tail;
      last_work = now;
    } else if (port::atomic_load<Order::relaxed, Scope::device>(&s->ticket.v) != seen) {
      last_work = now;  // posted, not yet claimed
    } else if (now - last_work > p.idle_ns) {
      port::atomic_store<Order::relaxed, Scope::system>(&h->state.v, mover_state(p.generation, kPhaseExiting));
      port::fence_system();
      if (port::load_acquire_system(&h->tail.v) == seen) {
        port::store_release_device(&s->leave.v, uint64_t{1});
        return;
      }
      port::atomic_store<Order::relaxed, Scope::system>(&h->state.v, mover_state(p.generation, kPhaseRunning));
      port::fence_system();
      last_work = now;
      continue;
    }
    const uint64_t done = port::atomic_load<Order::relaxed, Scope::device>(&s->completed.v);
    if (done != mirrored) {
      port::atomic_store<Order::relaxed, Scope::system>(&h->completed.v, done);
      mirrored = done;
    }
  }
}

template <bool kFence>
__global__ void __launch_bounds__(kMoverMaxThreads) mover_kernel(const MoverParams p) {
  if (p.preload) return;
  __shared__ uint64_t order;
  if (threadIdx.x == 0) order = port::atomic_fetch_add<Order::relaxed, Scope::device>(&p.dev->arrived.v, uint64_t{1});
  __syncthreads();
  const int lane = port::warp_lane();
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const uint64_t workers = static_cast<uint64_t>(gridDim.x) * (blockDim.x / kWarpSize) - 1;
  if (order == 0 && warp == 0) {
    if (lane == 0) front_loop(p);
    port::warp_sync();
  } else {
    worker_loop<kFence>(p, lane, workers);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint64_t left = port::atomic_add_acq_rel_device(&p.dev->left.v, uint64_t{1});
    if (left + 1 == gridDim.x) {
      // The last block out: the next launch starts from zero, then the host may see STOPPED.
      port::atomic_store<Order::relaxed, Scope::device>(&p.dev->arrived.v, uint64_t{0});
      port::atomic_store<Order::relaxed, Scope::device>(&p.dev->left.v, uint64_t{0});
      port::atomic_store<Order::relaxed, Scope::device>(&p.dev->leave.v, uint64_t{0});
      const uint64_t done = port::atomic_load<Order::relaxed, Scope::device>(&p.dev->completed.v);
      port::atomic_store<Order::relaxed, Scope::system>(&p.host->completed.v, done);
      port::fence_system();
      port::atomic_store<Order::relaxed, Scope::system>(&p.host->state.v, mover_state(p.generation, kPhaseStopped));
    }
  }
}

}  // namespace

cudaError_t launch_mover(const MoverParams& p, bool fence, int blocks, int threads, size_t smem, cudaStream_t stream) {
  if (fence) {
    mover_kernel<true><<<blocks, threads, smem, stream>>>(p);
  } else {
    mover_kernel<false><<<blocks, threads, smem, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t allow_mover_smem(size_t smem) {
  const int bytes = static_cast<int>(smem);
  cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(&mover_kernel<true>),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(&mover_kernel<false>),
                              cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace anyep_emunic::gpu
