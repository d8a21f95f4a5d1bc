// anyep/src/kernels/ht/combine.cu — HT intranode combine: the dispatch run backwards.
//
// Even blocks send, odd blocks receive. A sender warp owns (channel c, home rank h): the rows this
// rank received from h in channel c (rank_prefix(h-1) + recv_channel_prefix[h][c] + i) go, in that
// order, into ring (c, me) at h — the order they arrived in, so slot i of that ring holds the
// token whose send_head[t][me] is i. A receiver block's channel c is served by the R warps of one
// lane group; each takes every R-th token of the channel's range, waits until every rank that got
// the token has delivered its slot, sums them in FP32 (bias first, then ranks in ascending order)
// and writes BF16. A ring's head may move to the smallest position any of those warps still needs
// (shared memory), published with a system-scope max since several warps publish.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ht/device.cuh"

namespace anyep::ht {
namespace {

__device__ void send_channel(const CombineArgs& a, int c, int h) {
  const Ctx& x = a.x;
  const Geometry& g = a.g;
  const int lane = port::warp_lane(), R = x.R, me = x.rank, K = a.num_topk, C = g.channels;
  const uint64_t full = port::full_lane_mask();
  const int64_t block_begin = h > 0 ? a.rank_prefix_matrix[(h - 1) * R + me] : 0;
  const int64_t from_h = a.rank_prefix_matrix[h * R + me] - block_begin;
  const int64_t first = a.recv_channel_prefix_matrix[h * C + c];
  const int64_t next = c + 1 < C ? a.recv_channel_prefix_matrix[h * C + c + 1] : from_h;
  const int count = static_cast<int>(next - first);
  uint8_t* dst_region = x.peers[h];
  RingMeta* meta = dev::meta_of(dst_region, c, me);
  uint8_t* ring = dst_region + g.ring_off(c, me);
  const uint64_t* head = dev::head_of(x.local, c, h);
  const uint64_t base = port::load_acquire_system(head);
  uint64_t seen_head = base;
  const uint64_t x_bytes = 2ull * a.hidden;
  int published = 0;
  for (int n = 0; n < count; ++n) {
    const int64_t row = block_begin + first + n;
    if (base + n - seen_head >= uint64_t(g.slots)) {
      const uint64_t v = dev::warp_wait_total_above(head, base + n - g.slots, x.timeout_ns);
      if (v == 0) {
        if (lane == 0) dev::report(x.err, kErrSendTimeout, me, -1, h, c);
        return;
      }
      seen_head = v;
    }
    uint8_t* slot = ring + ((base + n) % g.slots) * g.slot_bytes;
    if (row < a.num_recv) {
      dev::warp_copy<false>(slot, reinterpret_cast<const uint8_t*>(a.x_data + row * a.hidden), int64_t(x_bytes), lane);
      if (lane < K)
        *dev::at<float>(slot, x_bytes + 4ull * lane) = a.topk_weights ? a.topk_weights[row * K + lane] : 0.f;
    }
    if (n + 1 - published >= g.chunk) {
      // The lanes' slot writes are ordered before lane 0's release of the new total.
      port::warp_sync(full);
      if (lane == 0) port::store_release_system(&meta->tail, base + n + 1);
      published = n + 1;
    }
  }
  port::warp_sync(full);
  if (lane == 0 && count != published) port::store_release_system(&meta->tail, base + count);
}

// Position of token t in ring (c, r) from send_head: the slot it took, or where the next would go.
__device__ __forceinline__ int ring_pos(int32_t sh) { return sh >= 0 ? sh : -sh - 1; }

__global__ void __launch_bounds__(kBlockThreads) combine_kernel(CombineArgs a) {
  const Ctx& x = a.x;
  const Geometry& g = a.g;
  const int warp = threadIdx.x / port::kWarpSize, lane = port::warp_lane();
  const int b = blockIdx.x / 2, R = x.R;
  const int q = warp % R, group = warp / R;
  const bool active = group < g.lanes;
  const int c = b * g.lanes + group;
  if (blockIdx.x % 2 == 0) {
    if (active) send_channel(a, c, q);
    return;
  }
  // Receiver. s_pos[warp][r]: the smallest position of ring (c, r) this warp may still read.
  __shared__ int s_pos[kWarps][kMaxRanks];
  __shared__ int s_fail;
  const uint64_t full = port::full_lane_mask();
  const int me = x.rank, K = a.num_topk;
  const int t0 = active ? g.range_begin(c, a.num_tokens) : 0, t1 = active ? g.range_begin(c + 1, a.num_tokens) : 0;
  // Lane r < R keeps ring r's state: its total before this call and its rings' base address.
  uint64_t base = 0;
  int end_pos = 0;
  if (active && lane < R) {
    base = *dev::mirror_of(x.local, c, lane);
    end_pos = t1 > t0 ? ring_pos(a.send_head[int64_t(t1 - 1) * R + lane]) +
                            (a.send_head[int64_t(t1 - 1) * R + lane] >= 0 ? 1 : 0)
                      : 0;
    s_pos[warp][lane] = t0 + q < t1 ? ring_pos(a.send_head[int64_t(t0 + q) * R + lane]) : end_pos;
  }
  if (threadIdx.x == 0) s_fail = 0;
  __syncthreads();
  const uint64_t x_bytes = 2ull * a.hidden;
  // Lane r < R publishes ring r's head: the smallest position the group's warps may still read.
  int published = 0;
  auto publish_heads = [&]() {
    port::warp_sync(full);
    if (lane < R) {
      int low = end_pos;
      for (int w = group * R; w < group * R + R; ++w) low = min(low, *reinterpret_cast<volatile int*>(&s_pos[w][lane]));
      if (low > published) {
        port::atomic_max_release_system(dev::head_of(x.peers[lane], c, me), base + low);
        published = low;
      }
    }
  };
  if (active) {
    int since_publish = 0;
    for (int t = t0 + q; t < t1; t += R) {
      const int32_t sh = lane < R ? a.send_head[int64_t(t) * R + lane] : -1;
      const int pos = ring_pos(sh);
      // Lanes r < R: wait for ring r to hold position pos (if the token went to r). Before a wait,
      // publish what this warp has freed: the sender may be waiting for exactly that space.
      const bool need = lane < R && sh >= 0;
      const RingMeta* meta = dev::meta_of(x.local, c, lane < R ? lane : 0);
      const bool ready = !need || port::load_acquire_system(&meta->tail) > base + pos;
      if (port::warp_ballot(full, !ready) != 0) {
        publish_heads();
        since_publish = 0;
      }
      bool ok = true;
      if (!ready) {
        const uint64_t start = port::now_ns();
        while (port::load_acquire_system(&meta->tail) <= base + pos) {
          if (port::now_ns() - start > x.timeout_ns) {
            dev::report(x.err, kErrRecvTimeout, me, -1, lane, c);
            ok = false;
            break;
          }
        }
      }
      // Lane r acquired ring r's total; the warp barrier passes that on to every lane's reads below.
      port::warp_sync(full);
      const uint64_t needers = port::warp_ballot(full, need);
      if (port::warp_ballot(full, !ok) != 0) {
        if (lane == 0) s_fail = 1;
        break;
      }
      // The slot of each rank that got the token (null: none), shared by all lanes once per token.
      const uint8_t* slot[kMaxRanks];
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r) {
        const uint64_t p = port::warp_broadcast(full, uint64_t(pos), r < R ? r : 0);
        const uint64_t rb = port::warp_broadcast(full, base, r < R ? r : 0);
        slot[r] = (r < R && ((needers >> r) & 1)) ? x.local + g.ring_off(c, r) + ((rb + p) % g.slots) * g.slot_bytes
                                                  : nullptr;
      }
      // Sum: bias, then each rank's slot in ascending rank order, in FP32.
      const uint16_t* b0 = a.bias0 ? a.bias0 + int64_t(t) * a.hidden : nullptr;
      const uint16_t* b1 = a.bias1 ? a.bias1 + int64_t(t) * a.hidden : nullptr;
      // kUnroll 16-byte chunks per lane and rank in flight: a warp's throughput is the bytes it
      // has in flight over the memory latency, and one chunk at a time starved it (measured: 4x).
      constexpr int kUnroll = 4;
      constexpr int64_t kStride = port::kWarpSize * 16;
      for (int64_t off0 = int64_t(lane) * 16; off0 < int64_t(x_bytes); off0 += kUnroll * kStride) {
        float acc[kUnroll][8];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t off = off0 + u * kStride;
          const bool in = off < int64_t(x_bytes);
          const uint4 v0 =
              (b0 && in) ? port::load16_read_once(reinterpret_cast<const uint8_t*>(b0) + off) : make_uint4(0, 0, 0, 0);
          const uint4 v1 =
              (b1 && in) ? port::load16_read_once(reinterpret_cast<const uint8_t*>(b1) + off) : make_uint4(0, 0, 0, 0);
          const uint32_t* w0 = &v0.x;
          const uint32_t* w1 = &v1.x;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[u][2 * j] = dev::bf16_to_float(w0[j] & 0xffffu) + dev::bf16_to_float(w1[j] & 0xffffu);
            acc[u][2 * j + 1] = dev::bf16_to_float(w0[j] >> 16) + dev::bf16_to_float(w1[j] >> 16);
          }
        }
#pragma unroll
        for (int r = 0; r < kMaxRanks; ++r) {
          if (slot[r] == nullptr) continue;
          uint4 v[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t off = off0 + u * kStride;
            v[u] = off < int64_t(x_bytes) ? port::load_l2(reinterpret_cast<const uint4*>(slot[r] + off))
                                          : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const uint32_t* w = &v[u].x;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              acc[u][2 * j] += dev::bf16_to_float(w[j] & 0xffffu);
              acc[u][2 * j + 1] += dev::bf16_to_float(w[j] >> 16);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t off = off0 + u * kStride;
          if (off >= int64_t(x_bytes)) continue;
          uint4 o;
          uint32_t* ow = &o.x;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            ow[j] = dev::float_to_bf16(acc[u][2 * j]) | (dev::float_to_bf16(acc[u][2 * j + 1]) << 16);
          *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(a.out + int64_t(t) * a.hidden) + off) = o;
        }
      }
      if (a.out_topk_weights != nullptr && lane < K) {
        float sum = 0.f;
#pragma unroll
        for (int r = 0; r < kMaxRanks; ++r)
          if (slot[r] != nullptr) sum += port::load_l2(dev::at<float>(slot[r], x_bytes + 4ull * lane));
        a.out_topk_weights[int64_t(t) * K + lane] = sum;
      }
      // Done with token t: this warp needs nothing below pos (+1 if it read the slot) any more.
      // The fence orders this warp's slot reads before the progress other warps may publish.
      port::fence_block();
      port::warp_sync(full);
      if (lane < R) s_pos[warp][lane] = pos + (sh >= 0 ? 1 : 0);
      if (++since_publish >= g.chunk) {
        publish_heads();
        since_publish = 0;
      }
    }
    // This warp is done: nothing more to read from any ring.
    port::warp_sync(full);
    if (lane < R) s_pos[warp][lane] = end_pos;
    publish_heads();
  }
  __syncthreads();
  // Every warp of the block is done: each ring of each channel here is drained (or failed).
  if (s_fail != 0) return;
  if (active && q == 0 && lane < R) {
    port::atomic_max_release_system(dev::head_of(x.peers[lane], c, me), base + end_pos);
    *dev::mirror_of(x.local, c, lane) = base + end_pos;
  }
}

}  // namespace

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream) {
  combine_kernel<<<2 * a.g.blocks, kBlockThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t preload_combine() { return load_functions(combine_kernel); }

}  // namespace anyep::ht
