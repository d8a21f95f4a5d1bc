// anyep/src/kernels/ht/dispatch_layout.cu — get_dispatch_layout: per-rank and per-expert token
// counts and the token -> rank membership, from topk_idx. One pass; counts in shared memory when
// they fit, then one global add per counter and block.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ht/device.cuh"

namespace anyep::ht {
namespace {

constexpr int kLayoutThreads = 256;
constexpr int kLayoutSmemInts = 12 * 1024;  // 48 KiB: E + R counters per block

__global__ void __launch_bounds__(kLayoutThreads) layout_kernel(LayoutArgs a, bool use_smem) {
  extern __shared__ int32_t s_cnt[];
  const int E = a.num_experts, R = a.num_ranks, K = a.num_topk;
  const int L = E / R;
  int32_t* cnt_e = use_smem ? s_cnt : a.num_tokens_per_expert;
  int32_t* cnt_r = use_smem ? s_cnt + E : a.num_tokens_per_rank;
  if (use_smem) {
    for (int i = threadIdx.x; i < E + R; i += blockDim.x) s_cnt[i] = 0;
    __syncthreads();
  }
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < a.num_tokens;
       t += int64_t(gridDim.x) * blockDim.x) {
    bool* row = a.is_token_in_rank + t * R;
    for (int r = 0; r < R; ++r) row[r] = false;
    int ranks[kMaxTopk];
    for (int k = 0; k < K; ++k) {
      const int64_t e = a.topk_idx[t * K + k];
      ranks[k] = -1;
      if (e < 0) continue;
      if (e >= E) {
        dev::report(a.err, kErrBadExpert, a.rank, static_cast<int>(e), -1, static_cast<int>(t));
        continue;
      }
      atomicAdd(cnt_e + e, 1);
      const int r = static_cast<int>(e / L);
      bool seen = false;
      for (int j = 0; j < k; ++j) seen = seen || ranks[j] == r;
      ranks[k] = r;
      if (!seen) {
        row[r] = true;
        atomicAdd(cnt_r + r, 1);
      }
    }
  }
  if (use_smem) {
    __syncthreads();
    for (int i = threadIdx.x; i < E + R; i += blockDim.x) {
      const int v = s_cnt[i];
      if (v != 0) atomicAdd(i < E ? a.num_tokens_per_expert + i : a.num_tokens_per_rank + (i - E), v);
    }
  }
}

}  // namespace

cudaError_t launch_layout(const LayoutArgs& a, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(a.num_tokens_per_rank, 0, sizeof(int32_t) * a.num_ranks, stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(a.num_tokens_per_expert, 0, sizeof(int32_t) * a.num_experts, stream);
  if (e != cudaSuccess || a.num_tokens == 0) return e;
  const bool use_smem = a.num_experts + a.num_ranks <= kLayoutSmemInts;
  const int blocks = (a.num_tokens + kLayoutThreads - 1) / kLayoutThreads < 128
                         ? (a.num_tokens + kLayoutThreads - 1) / kLayoutThreads
                         : 128;
  const size_t smem = use_smem ? sizeof(int32_t) * (a.num_experts + a.num_ranks) : 0;
  layout_kernel<<<blocks, kLayoutThreads, smem, stream>>>(a, use_smem);
  return cudaGetLastError();
}

cudaError_t preload_layout() { return load_functions(layout_kernel); }

}  // namespace anyep::ht
