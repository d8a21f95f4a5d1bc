// anyep/src/kernels/ht/dispatch.cu — HT intranode dispatch: senders and receivers run at once.
//
// Even blocks send, odd blocks receive (block pair b). A sender warp owns (channel c, destination
// d): it walks its channel's tokens in order, and each token for d goes into the next slot of
// ring (c, me) at rank d; the tail (a running total) is published every `chunk` tokens. A receiver
// warp owns (channel c, source s): it copies what ring (c, s) holds into the outputs at the rows
// rank_prefix(s-1) + start(c) + i, then publishes its head in rank s's region. Rings drain fully
// in every call (ht/layout.h). Every wait is bounded and reports the peer and channel.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ht/device.cuh"

namespace anyep::ht {
namespace {

__device__ void send_channel(const DispatchArgs& a, int c, int d, uint32_t epoch) {
  const Ctx& x = a.x;
  const Geometry& g = a.g;
  const int lane = port::warp_lane(), R = x.R, me = x.rank, K = a.num_topk, L = a.num_local_experts;
  const uint64_t full = port::full_lane_mask();
  uint8_t* dst_region = x.peers[d];
  RingMeta* meta = dev::meta_of(dst_region, c, me);
  uint8_t* ring = dst_region + g.ring_off(c, me);
  const uint64_t* head = dev::head_of(x.local, c, d);
  const int t0 = g.range_begin(c, a.num_tokens), t1 = g.range_begin(c + 1, a.num_tokens);
  if (lane == 0) {
    meta->start = c > 0 ? a.channel_prefix_matrix[d * g.channels + c - 1] : 0;
    meta->end = a.channel_prefix_matrix[d * g.channels + c];
    // Release: the receiver that sees this call's epoch sees start/end.
    port::store_release_system(&meta->tag, epoch);
  }
  // Every ring was drained by the previous call, so our head total there is the ring's total.
  const uint64_t base = port::load_acquire_system(head);
  uint64_t seen_head = base;
  const uint64_t sc_off = uint64_t(a.x_bytes), idx_off = sc_off + 4ull * a.num_scales, w_off = idx_off + 4ull * K,
                 src_off = w_off + 4ull * K;
  int n = 0, published = 0;
  for (int w0 = t0; w0 < t1; w0 += port::kWarpSize) {
    const int t = w0 + lane;
    const bool valid = t < t1;
    const bool in = valid && a.is_token_in_rank[int64_t(t) * R + d];
    uint64_t mask = port::warp_ballot(full, in);
    const int before = port::popcount64(mask & port::lanes_below());
    if (valid) a.send_head[int64_t(t) * R + d] = in ? n + before : -(n + before) - 1;
    while (mask != 0) {
      const int tok = w0 + port::lowest_bit64(mask);
      mask &= mask - 1;
      if (base + n - seen_head >= uint64_t(g.slots)) {
        // Ring full: wait until the receiver frees the slot of item n.
        const uint64_t h = dev::warp_wait_total_above(head, base + n - g.slots, x.timeout_ns);
        if (h == 0) {
          if (lane == 0) dev::report(x.err, kErrSendTimeout, me, -1, d, c);
          return;
        }
        seen_head = h;
      }
      uint8_t* slot = ring + ((base + n) % g.slots) * g.slot_bytes;
      dev::warp_copy<false>(slot, a.x_data + int64_t(tok) * a.x_bytes, a.x_bytes, lane);
      for (int i = lane; i < a.num_scales; i += port::kWarpSize)
        *dev::at<uint32_t>(slot, sc_off + 4ull * i) = *reinterpret_cast<const uint32_t*>(
            a.x_scales + 4 * (int64_t(tok) * a.scale_token_stride + int64_t(i) * a.scale_hidden_stride));
      if (lane < K) {
        const int64_t e = a.topk_idx[int64_t(tok) * K + lane];
        const int local = (e >= int64_t(d) * L && e < int64_t(d + 1) * L) ? static_cast<int>(e - int64_t(d) * L) : -1;
        *dev::at<int32_t>(slot, idx_off + 4ull * lane) = local;
        *dev::at<float>(slot, w_off + 4ull * lane) = local >= 0 ? a.topk_weights[int64_t(tok) * K + lane] : 0.0f;
      }
      if (lane == 0) *dev::at<int32_t>(slot, src_off) = tok;
      ++n;
      if (n - published >= g.chunk) {
        // The lanes' slot writes are ordered before lane 0's release of the new total.
        port::warp_sync(full);
        if (lane == 0) port::store_release_system(&meta->tail, base + n);
        published = n;
      }
    }
  }
  port::warp_sync(full);
  if (lane == 0 && n != published) port::store_release_system(&meta->tail, base + n);
}

__device__ void recv_channel(const DispatchArgs& a, int c, int s, uint32_t epoch) {
  const Ctx& x = a.x;
  const Geometry& g = a.g;
  const int lane = port::warp_lane(), R = x.R, me = x.rank, K = a.num_topk;
  const uint64_t full = port::full_lane_mask();
  RingMeta* meta = dev::meta_of(x.local, c, s);
  const uint8_t* ring = x.local + g.ring_off(c, s);
  uint64_t* mirror = dev::mirror_of(x.local, c, s);
  uint64_t* remote_head = dev::head_of(x.peers[s], c, me);
  if (!dev::warp_wait_tag(&meta->tag, epoch, x.timeout_ns)) {
    if (lane == 0) dev::report(x.err, kErrRecvTimeout, me, -1, s, c);
    return;
  }
  const int start = *reinterpret_cast<volatile int32_t*>(&meta->start);
  const int count = *reinterpret_cast<volatile int32_t*>(&meta->end) - start;
  if (lane == 0) a.recv_channel_prefix_matrix[s * g.channels + c] = start;
  const int64_t out_base = (s > 0 ? a.rank_prefix_matrix[(s - 1) * R + me] : 0) + start;
  // Rows past the outputs (num_worst_tokens too small, or counts that disagree with
  // is_token_in_rank) are consumed and dropped, never written; the error names the cause.
  const bool fits = out_base + count <= a.num_recv_capacity;
  if (!fits && lane == 0)
    dev::report(x.err, a.worst ? kErrWorstTooSmall : kErrCountsMismatch, me, a.num_recv_capacity, s,
                static_cast<int>(out_base + count));
  const uint64_t base = *mirror;
  const uint64_t sc_off = uint64_t(a.x_bytes), idx_off = sc_off + 4ull * a.num_scales, w_off = idx_off + 4ull * K,
                 src_off = w_off + 4ull * K;
  int consumed = 0;
  while (consumed < count) {
    const uint64_t tail = dev::warp_wait_total_above(&meta->tail, base + consumed, x.timeout_ns);
    if (tail == 0) {
      if (lane == 0) dev::report(x.err, kErrRecvTimeout, me, -1, s, c);
      return;
    }
    const int avail = tail - base < uint64_t(count) ? static_cast<int>(tail - base) : count;
    if (fits) {
      for (int i = consumed; i < avail; ++i) {
        const uint8_t* slot = ring + ((base + i) % g.slots) * g.slot_bytes;
        const int64_t row = out_base + i;
        dev::warp_copy<true>(a.recv_x + row * a.x_bytes, slot, a.x_bytes, lane);
        for (int j = lane; j < a.num_scales; j += port::kWarpSize)
          *reinterpret_cast<uint32_t*>(a.recv_scales + 4 * (row * a.num_scales + j)) =
              port::load_l2(dev::at<uint32_t>(slot, sc_off + 4ull * j));
        if (lane < K) {
          a.recv_topk_idx[row * K + lane] = port::load_l2(dev::at<int32_t>(slot, idx_off + 4ull * lane));
          a.recv_topk_weights[row * K + lane] = port::load_l2(dev::at<float>(slot, w_off + 4ull * lane));
        }
        if (lane == 0) a.recv_src_idx[row] = port::load_l2(dev::at<int32_t>(slot, src_off));
      }
    }
    // Our reads of the slots come before the release of the head that lets the sender reuse them.
    port::warp_sync(full);
    if (lane == 0) port::store_release_system(remote_head, base + avail);
    consumed = avail;
  }
  if (lane == 0) *mirror = base + count;
}

__global__ void __launch_bounds__(kBlockThreads) dispatch_kernel(DispatchArgs a) {
  const int warp = threadIdx.x / port::kWarpSize;
  const int b = blockIdx.x / 2;
  const int peer = warp % a.x.R, lane_group = warp / a.x.R;
  const uint32_t epoch = dev::current_epoch(a.x);
  if (lane_group < a.g.lanes) {
    const int c = b * a.g.lanes + lane_group;
    if (blockIdx.x % 2 == 0) {
      send_channel(a, c, peer, epoch);
    } else {
      recv_channel(a, c, peer, epoch);
    }
  }
  // num_worst_tokens: the rows past what this rank received hold no expert.
  if (a.worst && blockIdx.x % 2 == 1 && a.recv_topk_idx != nullptr) {
    const int64_t total = a.rank_prefix_matrix[(a.x.R - 1) * a.x.R + a.x.rank];
    const int64_t begin = total * a.num_topk, end = int64_t(a.num_recv_capacity) * a.num_topk;
    for (int64_t i = begin + int64_t(b) * blockDim.x + threadIdx.x; i < end; i += int64_t(a.g.blocks) * blockDim.x)
      a.recv_topk_idx[i] = -1;
  }
}

}  // namespace

cudaError_t launch_dispatch(const DispatchArgs& a, cudaStream_t stream) {
  dispatch_kernel<<<2 * a.g.blocks, kBlockThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t preload_dispatch() { return load_functions(dispatch_kernel); }

}  // namespace anyep::ht
