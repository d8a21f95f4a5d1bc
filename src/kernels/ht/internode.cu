// anyep/src/kernels/ht/internode.cu — the kernels of the internode composition
// (runtime/ht/internode.h) around the rail exchange (ht/net.cu): which tokens go to which node,
// tensor rows packed into the exchange's send area and taken apart again, and combine's sum at
// home. Plain loads and stores: the exchange kernels order these against the proxy.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ht/device.cuh"
#include "kernels/ht/internode_protocol.h"

namespace anyep::ht {
namespace {

constexpr int kRouteThreads = 1024;
constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / port::kWarpSize;
constexpr int kMaxRowBlocks = 1024;

// One block per node: a block-wide scan over the tokens numbers the ones that go to the node.
__global__ void __launch_bounds__(kRouteThreads) route_kernel(RouteArgs a) {
  __shared__ int32_t s_scan[kRouteThreads];
  __shared__ int32_t s_base;
  const int n = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  if (tid == 0) s_base = 0;
  __syncthreads();
  for (int t0 = 0; t0 < a.num_tokens; t0 += kRouteThreads) {
    const int t = t0 + tid;
    int flag = 0;
    if (t < a.num_tokens) {
      for (int k = 0; k < a.num_topk; ++k) {
        const int64_t e = a.topk_idx[int64_t(t) * a.num_topk + k];
        if (e >= a.num_experts || e < -1) {
          if (n == 0) dev::report(a.err, kErrBadExpert, a.rank, static_cast<int>(e), -1, t);
          continue;
        }
        flag |= e >= 0 && e / a.experts_per_node == n ? 1 : 0;
      }
    }
    s_scan[tid] = flag;
    __syncthreads();
    for (int d = 1; d < kRouteThreads; d <<= 1) {  // inclusive scan
      const int v = tid >= d ? s_scan[tid - d] : 0;
      __syncthreads();
      s_scan[tid] += v;
      __syncthreads();
    }
    if (t < a.num_tokens) a.pos[int64_t(n) * a.num_tokens + t] = flag ? s_base + s_scan[tid] - 1 : -1;
    __syncthreads();  // every thread has read s_base before it moves on
    if (tid == kRouteThreads - 1) s_base += s_scan[tid];
    __syncthreads();
  }
  if (tid == 0) a.send_rows[n] = s_base;
}

// A warp copies one segment of one row; 16-byte units when both sides allow them.
__device__ __forceinline__ void copy_segment(uint8_t* dst, int64_t dst_word_stride, const uint8_t* src,
                                             int64_t src_word_stride, int32_t words, int lane) {
  const bool vec = dst_word_stride == 4 && src_word_stride == 4 && words % 4 == 0 &&
                   ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15u) == 0;
  if (vec) {
    for (int32_t u = lane; u < words / 4; u += port::kWarpSize)
      port::store16(dst + int64_t(u) * 16, port::load16_read_once(src + int64_t(u) * 16));
    return;
  }
  for (int32_t w = lane; w < words; w += port::kWarpSize)
    *reinterpret_cast<uint32_t*>(dst + w * dst_word_stride) =
        *reinterpret_cast<const uint32_t*>(src + w * src_word_stride);
}

// One warp per (row, node) pair with pos, per row without (its node from node_rows' prefix).
__global__ void __launch_bounds__(kRowThreads) pack_kernel(PackArgs a) {
  __shared__ int64_t s_first[internode::kMaxNodes + 1];
  if (threadIdx.x == 0) {
    s_first[0] = 0;
    for (int n = 0; n < a.nodes; ++n) s_first[n + 1] = s_first[n] + (a.pos ? 0 : a.node_rows[n]);
  }
  __syncthreads();
  const int lane = port::warp_lane();
  const int64_t pairs = int64_t(a.num_rows) * (a.pos ? a.nodes : 1);
  const int64_t warps = int64_t(gridDim.x) * kRowWarps;
  for (int64_t p = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / port::kWarpSize; p < pairs; p += warps) {
    int64_t r, row;
    int n = 0;
    if (a.pos) {
      n = static_cast<int>(p / a.num_rows);
      r = p % a.num_rows;
      row = a.pos[int64_t(n) * a.num_rows + r];
    } else {
      r = p;
      while (n + 1 < a.nodes && s_first[n + 1] <= r) ++n;
      row = r - s_first[n];
      if (r >= s_first[a.nodes]) row = -1;
    }
    if (row < 0 || row >= a.capacity) continue;
    uint8_t* dst = a.send_area + uint64_t(n) * a.block_bytes + uint64_t(row) * a.row_bytes;
    for (int s = 0; s < a.num_segments; ++s) {
      const RowSegment& g = a.seg[s];
      copy_segment(dst + g.offset, 4, g.base + r * g.row_stride, g.word_stride, g.words, lane);
    }
  }
}

// One warp per exchange row.
__global__ void __launch_bounds__(kRowThreads) unpack_kernel(UnpackArgs a) {
  const int lane = port::warp_lane();
  const int64_t warps = int64_t(gridDim.x) * kRowWarps;
  for (int64_t r = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / port::kWarpSize; r < a.num_rows; r += warps) {
    const uint8_t* src = a.rows + uint64_t(r) * a.row_bytes;
    for (int s = 0; s < a.num_segments; ++s) {
      const RowSegment& g = a.seg[s];
      uint8_t* dst = g.base + r * g.row_stride;
      if (g.renumber_span < 0) {
        copy_segment(dst, g.word_stride, src + g.offset, 4, g.words, lane);
        continue;
      }
      // int64 expert ids (row-major): the node's own, numbered from 0 inside it, or -1.
      for (int32_t i = lane; i < g.words / 2; i += port::kWarpSize) {
        const int64_t e = *reinterpret_cast<const int64_t*>(src + g.offset + 8 * i);
        const bool mine = e >= g.renumber_base && e < g.renumber_base + g.renumber_span;
        reinterpret_cast<int64_t*>(dst)[i] = mine ? e - g.renumber_base : -1;
      }
    }
  }
}

// acc[i] += the i-th of the 8 BF16 values in v.
__device__ __forceinline__ void add_bf16x8(float* acc, const uint4& v) {
  float f[8];
  dev::bf16x8_to_float(v, f);
  for (int i = 0; i < 8; ++i) acc[i] += f[i];
}

// One block per token (grid-stride): each thread sums 8 BF16 values over the nodes, in node order.
__global__ void __launch_bounds__(kRowThreads) home_sum_kernel(HomeSumArgs a) {
  __shared__ int64_t s_first[internode::kMaxNodes + 1];
  __shared__ int64_t s_row[internode::kMaxNodes];
  if (threadIdx.x == 0) {
    s_first[0] = 0;
    for (int n = 0; n < a.nodes; ++n) s_first[n + 1] = s_first[n] + a.send_rows[n];
  }
  __syncthreads();
  const int units = a.hidden / 8;  // hidden is a multiple of 128
  for (int t = static_cast<int>(blockIdx.x); t < a.num_tokens; t += static_cast<int>(gridDim.x)) {
    if (static_cast<int>(threadIdx.x) < a.nodes) {
      const int n = static_cast<int>(threadIdx.x);
      const int32_t p = a.pos[int64_t(n) * a.num_tokens + t];
      s_row[n] = p >= 0 ? s_first[n] + p : -1;
    }
    __syncthreads();
    for (int u = static_cast<int>(threadIdx.x); u < units; u += kRowThreads) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int n = 0; n < a.nodes; ++n) {
        if (s_row[n] < 0) continue;
        add_bf16x8(acc, port::load16_read_once(a.rows + uint64_t(s_row[n]) * a.row_bytes + uint64_t(u) * 16));
      }
      const uint16_t* biases[2] = {a.bias0, a.bias1};
      for (const uint16_t* b : biases) {
        if (b != nullptr) add_bf16x8(acc, port::load16_read_once(b + int64_t(t) * a.hidden + int64_t(u) * 8));
      }
      uint32_t o[4];
      for (int j = 0; j < 4; ++j) o[j] = dev::float_to_bf16(acc[2 * j]) | (dev::float_to_bf16(acc[2 * j + 1]) << 16);
      port::store16(a.out + int64_t(t) * a.hidden + int64_t(u) * 8, make_uint4(o[0], o[1], o[2], o[3]));
    }
    if (a.out_weights != nullptr) {
      for (int k = static_cast<int>(threadIdx.x); k < a.num_topk; k += kRowThreads) {
        float acc = 0;
        for (int n = 0; n < a.nodes; ++n)
          if (s_row[n] >= 0)
            acc += *reinterpret_cast<const float*>(a.rows + uint64_t(s_row[n]) * a.row_bytes + a.weights_offset +
                                                   uint64_t(k) * 4);
        a.out_weights[int64_t(t) * a.num_topk + k] = acc;
      }
    }
    __syncthreads();  // s_row is rewritten for the next token
  }
}

int row_blocks(int64_t warps_needed) {
  const int64_t b = (warps_needed + kRowWarps - 1) / kRowWarps;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxRowBlocks ? kMaxRowBlocks : b));
}

}  // namespace

cudaError_t launch_route(const RouteArgs& a, cudaStream_t stream) {
  route_kernel<<<a.nodes, kRouteThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_pack(const PackArgs& a, cudaStream_t stream) {
  pack_kernel<<<row_blocks(int64_t(a.num_rows) * (a.pos ? a.nodes : 1)), kRowThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_unpack(const UnpackArgs& a, cudaStream_t stream) {
  unpack_kernel<<<row_blocks(a.num_rows), kRowThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_home_sum(const HomeSumArgs& a, cudaStream_t stream) {
  const int blocks = a.num_tokens < kMaxRowBlocks ? (a.num_tokens > 0 ? a.num_tokens : 1) : kMaxRowBlocks;
  home_sum_kernel<<<blocks, kRowThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t preload_internode() { return load_functions(route_kernel, pack_kernel, unpack_kernel, home_sum_kernel); }

}  // namespace anyep::ht
