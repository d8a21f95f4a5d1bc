// Kernels of the channel benchmark (host side: channel_bench.cpp).
#pragma once

#include <cstdint>

#include "channel/ring.h"
#include "common/gpu_runtime.h"

namespace anyep::bench {

// W warps push NOP commands whose payload is the %globaltimer reading just before the push.
// Warp w pushes into ring w % num_rings. period_ns > 0: warp w pushes one step (32 commands, one
// per lane) every period_ns, its schedule shifted by w * period_ns / W so the offered load is
// smooth (32 * W / period_ns commands/ns); period_ns == 0: as fast as the rings take them.
struct LoadParams {
  const channel::RingHandle* rings;
  uint32_t num_rings;
  uint32_t warps;
  uint64_t duration_ns;  // each warp stops stepping this long after its start
  uint64_t period_ns;
  int warp_push;                 // 1: RingHandle::push_warp (one claim per warp), 0: push (one per lane)
  unsigned long long* pushed;    // device: commands pushed (sum over warps)
  unsigned long long* failures;  // device: pushes that timed out
};
cudaError_t launch_load(const LoadParams& p, cudaStream_t s);

// One thread answers `n` pings: waits for ping == i (mapped host memory), stores %globaltimer to
// gtime[i], then pong = i. Gives up (writes pong = ~0u) if a ping does not come within 1 s.
cudaError_t launch_pingpong(uint32_t* ping, uint32_t* pong, uint64_t* gtime, uint32_t n, cudaStream_t s);

// out[0]: smallest non-zero step between successive %globaltimer reads, out[1]: mean step.
cudaError_t launch_timer_resolution(uint64_t* out, cudaStream_t s);

// Baseline: `warps` warps each store `per_lane` 16-byte values per lane into mapped host memory
// (`slots` slots, reused cyclically), with st.release.sys (release = 1) or plain stores.
cudaError_t launch_raw_stores(channel::TransferCmd* buf, uint32_t slots, uint32_t warps, uint32_t per_lane, int release,
                              cudaStream_t s);

// Clock-free round trip through the channel: one thread pushes a NOP, waits for done(index)
// (a host thread pops it), n times; out[i] = %globaltimer ns from before the push to done.
cudaError_t launch_channel_rtt(channel::RingHandle ring, uint32_t n, uint64_t* out, cudaStream_t s);

}  // namespace anyep::bench
