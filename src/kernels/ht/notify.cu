// anyep/src/kernels/ht/notify.cu — the coordination pass of an HT dispatch, and the barrier that
// starts every other HT call.
//
// Notify: block 0 runs barrier -> counts into every peer -> barrier -> prefix sums and the
// host-mapped receive counters; blocks 1..R each count one destination rank's tokens per channel
// (the sender-side channel prefix sums). The first barrier means every rank finished its earlier
// HT kernels (its rings are drained, its counts rows read), so writing into peers is safe.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ht/device.cuh"

namespace anyep::ht {
namespace {

__global__ void __launch_bounds__(kBlockThreads) barrier_kernel(Ctx x) { dev::barrier_block(x); }

__global__ void __launch_bounds__(kBlockThreads) notify_kernel(NotifyArgs a) {
  const Ctx& x = a.x;
  const int R = x.R, L = a.num_local_experts, me = x.rank;
  if (blockIdx.x == 0) {
    if (!dev::barrier_block(x)) return;
    // Row `me` of every peer's counts: my per-rank counts, then my counts for the peer's experts.
    const int row = R + L;
    for (int i = threadIdx.x; i < R * row; i += blockDim.x) {
      const int d = i / row, j = i % row;
      const int32_t v = j < R ? a.num_tokens_per_rank[j] : a.num_tokens_per_expert[d * L + (j - R)];
      *dev::at<int32_t>(x.peers[d], kCountsOff + 4ull * (uint64_t(me) * kCountsRow + j)) = v;
    }
    if (!dev::barrier_block(x)) return;
    const int32_t* counts = dev::at<int32_t>(x.local, kCountsOff);
    // Column j: tokens rank 0..i sends to rank j, inclusive.
    for (int j = threadIdx.x; j < R; j += blockDim.x) {
      int32_t sum = 0;
      for (int i = 0; i < R; ++i) {
        sum += port::load_l2(counts + i * kCountsRow + j);
        a.rank_prefix_matrix[i * R + j] = sum;
      }
      if (j == me && a.recv_counter != nullptr) *a.recv_counter = sum;
    }
    for (int l = threadIdx.x; l < L && a.recv_expert_counter != nullptr; l += blockDim.x) {
      int32_t sum = 0;
      for (int i = 0; i < R; ++i) sum += port::load_l2(counts + i * kCountsRow + R + l);
      const int al = a.expert_alignment;
      a.recv_expert_counter[l] = (sum + al - 1) / al * al;
    }
    // The host polls the mapped counters: push them out now.
    port::fence_system();
    return;
  }
  // Block 1 + d: tokens for rank d per channel (a warp per channel), then an inclusive prefix.
  __shared__ int32_t s_count[kMaxChannels];
  const int d = blockIdx.x - 1;
  const int C = a.g.channels;
  const int warp = threadIdx.x / port::kWarpSize, lane = port::warp_lane();
  for (int c = warp; c < C; c += kWarps) {
    const int t0 = a.g.range_begin(c, a.num_tokens), t1 = a.g.range_begin(c + 1, a.num_tokens);
    int n = 0;
    for (int t = t0 + lane; t < t1; t += port::kWarpSize) n += a.is_token_in_rank[int64_t(t) * R + d] ? 1 : 0;
    n = port::warp_reduce_sum(n);
    if (lane == 0) s_count[c] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t sum = 0;
    for (int c = 0; c < C; ++c) {
      sum += s_count[c];
      a.channel_prefix_matrix[d * C + c] = sum;
    }
  }
}

}  // namespace

cudaError_t launch_barrier(const Ctx& x, cudaStream_t stream) {
  barrier_kernel<<<1, kBlockThreads, 0, stream>>>(x);
  return cudaGetLastError();
}

cudaError_t launch_notify(const NotifyArgs& a, cudaStream_t stream) {
  notify_kernel<<<1 + a.x.R, kBlockThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t preload_notify() { return load_functions(barrier_kernel, notify_kernel); }

}  // namespace anyep::ht
