// anyep/src/kernels/common/device.cuh — device helpers both modes use: error reports, bounded
// waits, receive loads, BF16 conversions and the proxy command push.
#pragma once

#include <cstdint>

#include "channel/ring.h"
#include "common/portability.h"
#include "kernels/common/error_record.h"
#include "kernels/common/proxy_path.h"

namespace anyep::dev {

// First error wins: claim, fill the fields, publish the code last (release at system scope, so a
// host that sees the code sees the fields).
__device__ inline void report(ErrorRecord* err, uint32_t code, int rank, int expert, int peer, int value) {
  if (err == nullptr) return;
  if (atomicCAS_system(&err->claim, 0u, 1u) == 0u) {
    err->rank = rank;
    err->expert = expert;
    err->peer = peer;
    err->value = value;
    port::store_release_system(&err->code, code);
  }
}

// Scoped loads/stores of signal words: port::load_acquire_system / store_release_system (system
// scope: peers on other GPUs, the host), port::load_acquire_device / atomic_add_release_device
// (completion counts among blocks of this GPU), port::load16_read_once for inputs read once.
__device__ __forceinline__ void st16(void* p, const uint4& v) { port::store16(p, v); }

// Spin until ready(*p) (acquire, system scope); true with the value in *value (if wanted), false on timeout. W
// is the signal word: int32 in an LL buffer (direct peers), uint64 in the proxy's host counters. A
// non-null `mask_word` (shrink mode) also ends the wait, with false, once it turns non-zero: another
// thread masked the peer, so waits on it stop at once instead of each running into the timeout.
template <typename W, typename Ready>
__device__ inline bool wait_sys(const W* p, Ready ready, uint64_t timeout_ns, uint64_t* waited_ns,
                                const int32_t* mask_word, W* value) {
  const uint64_t start = port::now_ns();
  for (;;) {
    const W v = port::load_acquire_system(p);
    if (ready(v)) {
      if (waited_ns) *waited_ns = port::now_ns() - start;
      if (value) *value = v;
      return true;
    }
    if (mask_word != nullptr && port::load_acquire_device(mask_word) != 0) return false;
    if (port::now_ns() - start > timeout_ns) return false;
  }
}

// The 8 BF16 values of a 16-byte vector, as floats.
__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float* f) {
  const uint32_t* h = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = port::bf16x2_to_float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ float bf16_to_float(uint32_t b) { return __uint_as_float(b << 16); }
// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ uint32_t float_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu) != 0) return 0x7fc0u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Received data: a peer GPU (NVLink stores or copy engine) wrote it into our device memory, so an
// L2 load (cg) sees it; in a host-staged buffer a proxy wrote it into host memory through the NIC,
// and a cached copy of an earlier round's line may sit in L2, so fetch it again (cv).
// With host_mem known only at run time both loads are compiled in, the one not taken predicated
// off: a copy loop that pays that per load instantiates ld_recv<kHostMem> instead, under one
// uniform branch on the kernel argument.
template <bool kHostMem, typename V>
__device__ __forceinline__ V ld_recv(const V* p) {
  if constexpr (kHostMem)
    return port::load_uncached(p);
  else
    return port::load_l2(p);
}
template <typename V>
__device__ __forceinline__ V ld_recv(const V* p, bool host_mem) {
  return host_mem ? ld_recv<true>(p) : ld_recv<false>(p);
}

// Push one proxy command into the ring of its fence group (see ProxyPath). A push that times out
// has filled the ring's error record (the runtime raises it); report it here too so waits end.
// `expert` is the record's expert field (the HT rail exchange puts the node there).
__device__ inline void push_cmd(const ProxyPath& proxy, ErrorRecord* err, int rank, uint32_t tag,
                                const channel::TransferCmd& cmd, int expert, int peer) {
  const channel::RingHandle& ring = proxy.rings[tag % static_cast<uint32_t>(proxy.num_rings)];
  if (ring.push(cmd) == channel::kPushFailed)
    report(err, kErrRingTimeout, rank, expert, peer, static_cast<int>(ring.ring_id));
}

}  // namespace anyep::dev
