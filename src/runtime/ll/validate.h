// anyep/src/runtime/ll/validate.h — the LL call contract: the arguments of a dispatch / combine as
// tensor descriptors, the outputs the caller allocates, and every check on them. Pure functions
// over descriptors (no CUDA, no torch), so the same messages reach Python and C callers and CPU
// tests cover them. Each failure throws InvalidArgument naming the argument.
// The launching side is ll/api.h.
#pragma once

#include <cstdint>

#include "kernels/ll/layout.h"
#include "runtime/common/tensor_ref.h"

namespace anyep::runtime {

// What the checks need to know of the buffer a call runs on.
struct LLBufferInfo {
  int num_ranks = 1;      // R
  int device = 0;         // every tensor must live on this CUDA device
  int64_t num_bytes = 0;  // LL buffer size (the shape must fit)
  bool shrink = false;    // built with enable_shrink: the rank mask exists
  bool compact = false;   // the compact dispatch layout (ll/layout.h; ANYEP_LL_LAYOUT)
};

// ANYEP_LL_LAYOUT: true for the compact dispatch layout. Read by whoever sizes or builds a buffer.
bool compact_layout_from_env();

struct LLDispatchIn {
  TensorRef x;                      // BFloat16 [N, H], N <= T
  TensorRef topk_idx;               // Long [N, K], values in [-1, E)
  int64_t max_tokens = 0;           // T: num_max_dispatch_tokens_per_rank
  int64_t num_experts = 0;          // E: a multiple of R
  TensorRef cumulative_recv_stats;  // optional Int [L]: adds each local expert's received rows
  TensorRef wait_recv_cost_stats;   // optional Long [R]: adds the wait per source rank (ns)
  bool use_fp8 = true;
  bool round_scale = false;  // FP8 scales rounded up to powers of two
  bool use_ue8m0 = false;    // scales as packed UE8M0 exponents (needs use_fp8 and round_scale)
};

// Outputs (allocate them as LLDispatchPlan says). `src_info` views the start of the handle's
// storage (ll/layout.h, "Handle storage"); the same descriptor goes back into combine.
struct LLDispatchOut {
  TensorRef recv_x, recv_scales, recv_count, src_info, layout_range;
};

struct LLDispatchPlan {
  ll::Layout g;                          // T, H, R, E
  int64_t num_tokens = 0, num_topk = 0;  // N, K
  OutputSpec recv_x;                     // [L, R*T, H] Float8_e4m3fn with use_fp8, else BFloat16
  OutputSpec recv_scales;                // use_fp8 only: [L, R*T, G] column-major (storage [L, G, R*T]):
                                         // Float, G = H/128; Int (4 UE8M0 exponents each) with use_ue8m0, G = H/512
  OutputSpec recv_count;                 // Int [L]
  OutputSpec src_info;                   // Int [L, R*T] view of a handle storage of g.handle_ints() Int
  OutputSpec layout_range;               // Long [L, R]: begin << 32 | count per (local expert, source rank)
};

struct LLCombineIn {
  TensorRef x;             // BFloat16 [L, R*T, H]: expert outputs for the dispatch's rows
  TensorRef topk_idx;      // Long [N, K] (the dispatch's)
  TensorRef topk_weights;  // Float [N, K]
  TensorRef src_info;      // the dispatch's src_info output (its whole handle storage behind it)
  TensorRef layout_range;  // the dispatch's layout_range output
  int64_t max_tokens = 0;
  int64_t num_experts = 0;
  TensorRef wait_recv_cost_stats;  // optional Long [R]
  bool use_logfmt = false;         // rows travel as LogFMT-10 (kernels/ll/logfmt.h); every rank must agree
};

struct LLCombinePlan {
  ll::Layout g;
  int64_t num_tokens = 0, num_topk = 0;
  OutputSpec out;  // BFloat16 [N, H]
};

// Input checks of a dispatch (tensors, then the shape against the buffer); returns the outputs
// to allocate.
LLDispatchPlan validate_dispatch(const LLDispatchIn& in, const LLBufferInfo& buf);
// The outputs against the plan (dtype, shape, strides, device, the handle's storage size).
void validate_dispatch_outputs(const LLDispatchPlan& plan, const LLDispatchOut& out, const LLBufferInfo& buf);

// Input checks of a combine, the handle included; returns the output to allocate when the caller
// brings none.
LLCombinePlan validate_combine(const LLCombineIn& in, const LLBufferInfo& buf);
void validate_combine_output(const LLCombinePlan& plan, const TensorRef& out, const LLBufferInfo& buf);

// A call's counts: num_tokens in [0, max_tokens], num_topk in [1, ll::kMaxTopk].
void validate_counts(int64_t num_tokens, int64_t num_topk, int64_t max_tokens);

// The shape against the limits (ll::layout_unsupported) and the buffer size.
ll::Layout validate_layout(int64_t max_tokens, int64_t hidden, int64_t num_experts, const LLBufferInfo& buf);

// topk_idx values (copied to the host) must lie in [-1, num_experts).
void validate_topk_values(const int64_t* values, int64_t count, int64_t num_experts);

// Rank masking (low_latency_update/query/clean_mask_buffer): the buffer must be in shrink mode,
// the rank in [0, R), and the query's output an Int [R] contiguous tensor on the buffer's device.
void validate_mask_call(const LLBufferInfo& buf);
void validate_mask_rank(int64_t rank, const LLBufferInfo& buf);
void validate_mask_status(const TensorRef& mask_status, const LLBufferInfo& buf);

}  // namespace anyep::runtime
