#include "bench_kernels.h"

namespace anyep::bench {

__global__ void load_kernel(LoadParams p) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / port::kWarpSize;
  if (warp >= p.warps) return;
  const channel::RingHandle ring = p.rings[warp % p.num_rings];  // a register copy: no reload per push
  // Lane 0's clock drives the loop so every decision is warp-uniform (push_warp needs that).
  const uint64_t start = port::warp_broadcast(port::full_lane_mask(), port::now_ns(), 0);
  const uint64_t phase = p.period_ns ? p.period_ns * warp / p.warps : 0;
  uint64_t steps = 0, failed = 0;
  for (;;) {
    uint64_t now = port::warp_broadcast(port::full_lane_mask(), port::now_ns(), 0);
    if (now - start >= p.duration_ns) break;
    if (p.period_ns) {
      const uint64_t due = start + phase + steps * p.period_ns;
      while (now < due) {
        port::spin_pause();
        now = port::warp_broadcast(port::full_lane_mask(), port::now_ns(), 0);
      }
    }
    const channel::TransferCmd c = channel::make_nop(port::now_ns());
    const uint64_t idx = p.warp_push ? ring.push_warp(c) : ring.push(c);
    failed += idx == channel::kPushFailed;
    ++steps;
  }
  atomicAdd(p.pushed, static_cast<unsigned long long>(steps - failed));
  if (failed) atomicAdd(p.failures, static_cast<unsigned long long>(failed));
}

cudaError_t launch_load(const LoadParams& p, cudaStream_t s) {
  constexpr uint32_t kWarpsPerBlock = 4;
  load_kernel<<<(p.warps + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * port::kWarpSize, 0, s>>>(p);
  return cudaGetLastError();
}

__global__ void pingpong_kernel(uint32_t* ping, uint32_t* pong, uint64_t* gtime, uint32_t n) {
  for (uint32_t i = 1; i <= n; ++i) {
    const uint64_t t0 = port::now_ns();
    while (port::load_acquire_system(ping) != i) {
      if (port::now_ns() - t0 > 1'000'000'000ull) {
        port::store_release_system(pong, ~0u);
        return;
      }
    }
    gtime[i] = port::now_ns();
    port::store_release_system(pong, i);  // release: gtime[i] is visible before pong
  }
}

cudaError_t launch_pingpong(uint32_t* ping, uint32_t* pong, uint64_t* gtime, uint32_t n, cudaStream_t s) {
  pingpong_kernel<<<1, 1, 0, s>>>(ping, pong, gtime, n);
  return cudaGetLastError();
}

__global__ void timer_resolution_kernel(uint64_t* out) {
  uint64_t prev = port::now_ns(), first = prev, min_step = ~0ull, changes = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t t = port::now_ns();
    if (t != prev) {
      min_step = t - prev < min_step ? t - prev : min_step;
      ++changes;
      prev = t;
    }
  }
  out[0] = min_step;
  out[1] = changes ? (prev - first) / changes : 0;
}

cudaError_t launch_timer_resolution(uint64_t* out, cudaStream_t s) {
  timer_resolution_kernel<<<1, 1, 0, s>>>(out);
  return cudaGetLastError();
}

__global__ void raw_stores_kernel(channel::TransferCmd* buf, uint32_t slots, uint32_t per_lane, int release) {
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t nthreads = gridDim.x * blockDim.x;
  for (uint32_t k = 0; k < per_lane; ++k) {
    channel::TransferCmd* s = &buf[(uint64_t{k} * nthreads + tid) % slots];
    if (release) {
      port::store16_release_system(&s->lo, k + 1, tid);
    } else {
      *reinterpret_cast<ulonglong2*>(s) = make_ulonglong2(k + 1, tid);
    }
  }
}

cudaError_t launch_raw_stores(channel::TransferCmd* buf, uint32_t slots, uint32_t warps, uint32_t per_lane, int release,
                              cudaStream_t s) {
  constexpr uint32_t kWarpsPerBlock = 4;
  raw_stores_kernel<<<warps / kWarpsPerBlock, kWarpsPerBlock * port::kWarpSize, 0, s>>>(buf, slots, per_lane, release);
  return cudaGetLastError();
}

__global__ void channel_rtt_kernel(channel::RingHandle ring, uint32_t n, uint64_t* out) {
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t t0 = port::now_ns();
    const uint64_t idx = ring.push(channel::make_nop(t0));
    if (idx == channel::kPushFailed || !ring.wait_done(idx)) {
      out[i] = ~0ull;
      return;
    }
    out[i] = port::now_ns() - t0;
  }
}

cudaError_t launch_channel_rtt(channel::RingHandle ring, uint32_t n, uint64_t* out, cudaStream_t s) {
  channel_rtt_kernel<<<1, 1, 0, s>>>(ring, n, out);
  return cudaGetLastError();
}

}  // namespace anyep::bench
