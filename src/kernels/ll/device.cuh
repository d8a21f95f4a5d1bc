// anyep/src/kernels/ll/device.cuh — device helpers shared by the LL kernels: bounded waits,
// error reporting, the scoped loads/stores the signalling protocol relies on.
#pragma once

#include <cstdint>

#include "common/portability.h"
#include "kernels/common/device.cuh"
#include "kernels/ll/kernels.h"
#include "kernels/ll/timeline.h"

namespace anyep::ll::dev {

// The helpers both modes share (kernels/common/device.cuh).
using anyep::dev::bf16x8_to_float;
using anyep::dev::ld_recv;
using anyep::dev::push_cmd;
using anyep::dev::report;
using anyep::dev::st16;
using anyep::dev::wait_sys;

// Shrink mode: is rank r masked? Always false without a mask (the normal path: one test of a
// kernel argument).
__device__ __forceinline__ bool rank_masked(const Common& c, int r) {
  return c.mask != nullptr && port::load_acquire_device(c.mask + r) != 0;
}

// rank_masked for a branch the whole block takes (it may hold __syncthreads): thread 0 reads the
// mask once and shares it, so a mask that changes meanwhile cannot split the block.
__device__ inline bool rank_masked_block(const Common& c, int r) {
  if (c.mask == nullptr) return false;  // a kernel argument: uniform
  __shared__ int s_masked;
  __syncthreads();  // earlier readers of s_masked are done
  if (threadIdx.x == 0) s_masked = port::load_acquire_device(c.mask + r);
  __syncthreads();
  return s_masked != 0;
}

// A count or flag stored directly on rank `peer` (release: ordered after the data it covers). The
// own rank's reader is on this GPU, so device scope suffices there; a peer's needs system scope,
// whose release waits for this thread's NVLink stores (and those it observed) to complete.
template <typename W>  // int32_t (counts, flags) or uint64_t (row flags)
__device__ __forceinline__ void store_signal(const Common& c, int peer, W* p, W v) {
  if (peer == c.rank)
    port::store_release_device(p, v);
  else
    port::store_release_system(p, v);
}

// Does rank r take direct stores (a CUDA IPC / NVLink pointer in c.peers)? Without a kernel
// argument saying all do, one load of the peer table.
__device__ __forceinline__ bool direct_peer(const Common& c, int r) { return c.all_direct || c.peers[r] != nullptr; }

// A wait on rank `peer`: wait(mask_word) spins until the signal came (true), or until it timed out
// or the non-null *mask_word turned non-zero (false). Shrink mode (c.mask set) skips a masked peer
// at once and masks one that does not come, so the other waits on it stop at once; otherwise a
// wait that ends without the signal sets *timed_out for the caller to report.
template <typename Wait>
__device__ inline bool wait_on_peer(const Common& c, int peer, bool* timed_out, Wait wait) {
  *timed_out = false;
  const int32_t* mask_word = c.mask != nullptr ? c.mask + peer : nullptr;
  if (mask_word != nullptr && port::load_acquire_device(mask_word) != 0) return false;
  if (wait(mask_word)) return true;
  if (mask_word == nullptr) {
    *timed_out = true;
  } else {
    atomicExch(c.mask + peer, 1);  // timed out (or masked meanwhile): skip the peer from now on
  }
  return false;
}

// A count/flag signal at byte offset `off` of the signal area, sent by rank `peer`: a direct peer
// stores it into our buffer (int32); a proxy adds to counter counter_of(off) in host memory
// (64-bit). Spin until ready(low 32 bits) (acquire, system scope); true with them in *value (if
// non-null), false when none came:
//  - shrink mode: the peer is masked (before or during the wait), or the wait timed out, which
//    masks it here (the call goes on without it, as DeepEP's elastic mode does);
//  - otherwise the wait timed out and *timed_out is set: the caller reports the error, naming the peer.
template <typename Ready>
__device__ inline bool wait_signal_until(const Common& c, bool direct, uint64_t off, int peer, Ready ready,
                                         uint64_t* waited_ns, bool* timed_out, uint32_t* value) {
  return wait_on_peer(c, peer, timed_out, [&](const int32_t* mask_word) {
    bool ok;
    if (direct) {
      int32_t v = 0;
      ok = wait_sys(
          reinterpret_cast<const int32_t*>(c.local + off), [&](int32_t w) { return ready(static_cast<uint32_t>(w)); },
          c.timeout_ns, waited_ns, mask_word, &v);
      if (value) *value = static_cast<uint32_t>(v);
    } else {
      static_assert(sizeof(*c.proxy.counters) == sizeof(uint64_t), "proxy counters are 64-bit words");
      uint64_t v = 0;
      ok = wait_sys(
          reinterpret_cast<const uint64_t*>(c.proxy.counters + counter_of(off)),
          [&](uint64_t w) { return ready(static_cast<uint32_t>(w)); }, c.timeout_ns, waited_ns, mask_word, &v);
      if (value) *value = static_cast<uint32_t>(v);
    }
    return ok;
  });
}

// A BF16 combine row from a direct owner (rank `peer`), at slot offset `off`: spin until its flag
// (the header's first 8 bytes) holds combine_row_flag(epoch) (acquire, system scope). Returns and
// ends as wait_signal_until.
__device__ inline bool wait_row_flag(const Common& c, uint64_t off, int peer, uint32_t epoch, uint64_t* waited_ns,
                                     bool* timed_out) {
  const uint64_t want = combine_row_flag(epoch);
  return wait_on_peer(c, peer, timed_out, [&](const int32_t* mask_word) {
    return wait_sys(
        reinterpret_cast<const uint64_t*>(c.local + off), [want](uint64_t w) { return w == want; }, c.timeout_ns,
        waited_ns, mask_word, static_cast<uint64_t*>(nullptr));
  });
}

// A dispatch count (never 0 once sent: count + 1): its value, or 0 when none came (as above).
__device__ inline int wait_signal(const Common& c, bool direct, uint64_t off, int peer, uint64_t* waited_ns,
                                  bool* timed_out) {
  uint32_t v = 0;
  return wait_signal_until(
             c, direct, off, peer, [](uint32_t w) { return w != 0u; }, waited_ns, timed_out, &v)
             ? static_cast<int>(v)
             : 0;
}

// Combine flags stored directly count calls instead of being reset (Workspace::combine_epoch): the
// flag of call `epoch` on a half has come once the word has reached it. Compared as a signed
// difference, so the count may wrap.
__device__ __forceinline__ bool epoch_reached(uint32_t word, uint32_t epoch) {
  return static_cast<int32_t>(word - epoch) >= 0;
}

// The reader resets a signal it consumed; the next writer of it is causally after this kernel.
__device__ inline void reset_signal(const Common& c, bool direct, uint64_t off) {
  if (direct) {
    *reinterpret_cast<int32_t*>(c.local + off) = 0;
  } else {
    // Volatile: a host-memory word the proxy adds to; ordered before later signals by the
    // release stores/fences that follow it in this kernel.
    *reinterpret_cast<volatile unsigned long long*>(c.proxy.counters + counter_of(off)) = 0ull;
  }
}

__device__ inline void push_cmd(const Common& c, uint32_t tag, const channel::TransferCmd& cmd, int expert, int peer) {
  push_cmd(c.proxy, c.err, c.rank, tag, cmd, expert, peer);
}

// A proxy WRITE of fence group `tag` (symmetric offsets). Fits by construction (the runtime
// refuses buffers beyond the 64 GiB offset reach, and messages are far below 16 MiB); make_write
// traps with the field's name should that ever break, instead of pushing a half-built command.
__device__ inline void push_write(const Common& c, uint32_t tag, int peer, uint64_t src_off, uint64_t dst_off,
                                  uint64_t len, int expert) {
  push_cmd(c, tag, channel::make_write(static_cast<uint32_t>(peer), src_off, dst_off, len, tag, false), expert, peer);
}

// The count or flag of fence group `tag`: the receiving proxy adds `value` to `counter` once
// `fence_count` WRITEs of the group landed (kFenceCount). Pushed after those WRITEs, same ring.
__device__ inline void push_count_signal(const Common& c, uint32_t tag, int peer, uint32_t counter, int value,
                                         int fence_count, int expert) {
  // Fits by construction like push_write (counters and tags are laid out by the runtime).
  push_cmd(c, tag,
           channel::make_signal(static_cast<uint32_t>(peer), counter, value, channel::cmd::kFenceCount, tag,
                                static_cast<uint32_t>(fence_count)),
           expert, peer);
}

// The last block of a grid to call this (per counter) gets true; the counter is reset for the
// next launch. Every earlier block's writes are visible to the last one (fence + atomic).
__device__ inline bool last_block(int32_t* counter) {
  __shared__ int s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    port::fence_device();
    const int prev = atomicAdd(counter, 1);
    s_last = (prev == static_cast<int>(gridDim.x) - 1);
    if (s_last) atomicExch(counter, 0);
    port::fence_device();
  }
  __syncthreads();
  return s_last != 0;
}

}  // namespace anyep::ll::dev
