// anyep/src/runtime/ht/validate.h — the HT (normal mode) call contract: every argument check of
// get_dispatch_layout, dispatch and combine as pure functions over tensor descriptors, and the
// outputs a call needs. Plain C++, no CUDA: unit-tested on every machine (tests/unit/runtime).
// Each check throws InvalidArgument naming the argument.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ht/layout.h"
#include "runtime/common/tensor_ref.h"

namespace anyep::runtime {

struct HTBufferInfo {
  int rank = 0;
  int num_ranks = 1;      // R
  int device = 0;         // every tensor must live on this CUDA device
  int64_t num_bytes = 0;  // HT region size (num_nvl_bytes)
  int device_sms = 0;     // SMs of the device (Config.num_sms may not exceed it: blocks must co-reside)
};

// DeepEP's Config fields the intranode kernels use.
struct HTConfig {
  int64_t num_sms = 20;
  int64_t chunk_send = 6;    // num_max_nvl_chunked_send_tokens
  int64_t chunk_recv = 256;  // num_max_nvl_chunked_recv_tokens
};

struct HTLayoutIn {
  TensorRef topk_idx;  // Long [N, K]
  int64_t num_experts = 0;
};
struct HTLayoutPlan {
  int64_t num_tokens = 0, num_topk = 0;
  OutputSpec num_tokens_per_rank;    // Int [R]
  OutputSpec num_tokens_per_expert;  // Int [E]
  OutputSpec is_token_in_rank;       // Bool [N, R]
};
HTLayoutPlan validate_ht_layout(const HTLayoutIn& in, const HTBufferInfo& buf);

struct HTDispatchIn {
  TensorRef x;                             // BFloat16 [N, H], or Float8_e4m3fn [N, H] with x_scales
  TensorRef x_scales;                      // Float or Int [N, H/128] (any strides), FP8 only
  TensorRef topk_idx;                      // Long [N, K], optional (with topk_weights)
  TensorRef topk_weights;                  // Float [N, K]
  TensorRef num_tokens_per_rank;           // Int [R] (not in a cached call)
  TensorRef is_token_in_rank;              // Bool [N, R]
  TensorRef num_tokens_per_expert;         // Int [E] (not in a cached call)
  TensorRef cached_rank_prefix_matrix;     // Int [R, R]: a cached call (the handle's)
  TensorRef cached_channel_prefix_matrix;  // Int [R, C]
  int64_t cached_num_recv_tokens = 0;
  int64_t expert_alignment = 1;
  int64_t num_worst_tokens = 0;
  HTConfig config;
};
struct HTDispatchPlan {
  bool cached = false;
  int64_t num_tokens = 0, hidden = 0, num_topk = 0, num_experts = 0, num_local_experts = 0;
  int64_t x_bytes = 0;  // bytes per row of x
  int64_t num_scales = 0, scale_token_stride = 0, scale_hidden_stride = 0;
  DType x_dtype = DType::kOther, scales_dtype = DType::kOther;
  ht::Geometry g;
  OutputSpec rank_prefix_matrix;     // Int [R, R] (non-cached)
  OutputSpec channel_prefix_matrix;  // Int [R, C] (non-cached)
};
HTDispatchPlan validate_ht_dispatch(const HTDispatchIn& in, const HTBufferInfo& buf);

// The outputs once the received count M is known (exact, cached, or num_worst_tokens).
struct HTDispatchOutSpecs {
  OutputSpec recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights;
  OutputSpec recv_channel_prefix_matrix;  // Int [R, C]
  OutputSpec recv_src_idx;                // Int [M]
  OutputSpec send_head;                   // Int [N, R]
};
HTDispatchOutSpecs ht_dispatch_outputs(const HTDispatchPlan& p, int64_t num_recv, const HTBufferInfo& buf);

struct HTCombineIn {
  TensorRef x;                           // BFloat16 [M, H]
  TensorRef topk_weights;                // optional Float [M, K]
  TensorRef bias0, bias1;                // optional BFloat16 [N, H]
  TensorRef src_idx;                     // Int [M] (the handle's recv_src_idx)
  TensorRef rank_prefix_matrix;          // Int [R, R]
  TensorRef recv_channel_prefix_matrix;  // Int [R, C]
  TensorRef send_head;                   // Int [N, R]
  HTConfig config;
};
struct HTCombinePlan {
  int64_t num_recv = 0, num_tokens = 0, hidden = 0, num_topk = 0;
  ht::Geometry g;
  OutputSpec out;          // BFloat16 [N, H]
  OutputSpec out_weights;  // Float [N, K] when topk_weights given
};
HTCombinePlan validate_ht_combine(const HTCombineIn& in, const HTBufferInfo& buf);

// Bytes of the HT region for R ranks, a config and a row of `hidden_bytes` (BF16 or FP8 payload,
// top-k up to 16, FP8 scales included): Config.get_nvl_buffer_size_hint.
int64_t ht_size_hint(int64_t hidden_bytes, int64_t num_ranks, int64_t num_sms, int64_t chunk_recv);

}  // namespace anyep::runtime
