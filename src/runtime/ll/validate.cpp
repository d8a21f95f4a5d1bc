#include "runtime/ll/validate.h"

#include <algorithm>
#include <string>

#include "common/env.h"
#include "common/error.h"
#include "runtime/common/check.h"

namespace anyep::runtime {
namespace {

using std::to_string;

OutputSpec column_major_scales(DType dtype, int64_t L, int64_t RT, int64_t G) {
  // DeepEP's layout: storage [L, G, R*T], returned as the view [L, R*T, G].
  OutputSpec s = contiguous_spec(dtype, {L, RT, G});
  s.strides[0] = G * RT;
  s.strides[1] = 1;
  s.strides[2] = RT;
  return s;
}

std::string not_multiple(int64_t E, int R) {
  return "num_experts=" + to_string(E) + " is not a multiple of the number of ranks " + to_string(R);
}

}  // namespace

bool compact_layout_from_env() { return env::get_enum("ANYEP_LL_LAYOUT") == "compact"; }

ll::Layout validate_layout(int64_t T, int64_t H, int64_t E, const LLBufferInfo& buf) {
  const ll::Layout g{T, H, buf.num_ranks, E, buf.compact};
  if (const char* why = ll::layout_unsupported(g)) throw InvalidArgument(std::string("anyep LL: ") + why);
  if (static_cast<int64_t>(g.total_bytes()) > buf.num_bytes)
    throw InvalidArgument("anyep LL: buffer too small: shape (tokens " + to_string(T) + ", hidden " + to_string(H) +
                          ", experts " + to_string(E) + ") needs " + to_string(g.total_bytes()) +
                          " bytes, buffer has " + to_string(buf.num_bytes) + " (see get_low_latency_rdma_size_hint)");
  return g;
}

void validate_counts(int64_t N, int64_t K, int64_t T) {
  expect(N >= 0 && N <= T, [&] {
    return std::string() + to_string(N) + " tokens, more than num_max_dispatch_tokens_per_rank=" + to_string(T);
  });
  expect(K >= 1 && K <= ll::kMaxTopk, [&] {
    return std::string() + "num_topk (topk_idx's columns) must be in [1, " + to_string(ll::kMaxTopk) + "], got " +
           to_string(K);
  });
}

LLDispatchPlan validate_dispatch(const LLDispatchIn& in, const LLBufferInfo& buf) {
  const int dev = buf.device, R = buf.num_ranks;
  const int64_t T = in.max_tokens, E = in.num_experts;
  expect_tensor(in.x, "x", DType::kBFloat16, 2, dev);
  expect_tensor(in.topk_idx, "topk_idx", DType::kInt64, 2, dev);
  const int64_t N = in.x.shape[0], H = in.x.shape[1], K = in.topk_idx.shape[1];
  expect(in.topk_idx.shape[0] == N, [&] {
    return std::string() + "topk_idx has " + to_string(in.topk_idx.shape[0]) + " rows, x has " + to_string(N);
  });
  expect(N <= T, [&] {
    return std::string() + "x has " + to_string(N) +
           " tokens, more than num_max_dispatch_tokens_per_rank=" + to_string(T);
  });
  expect(K >= 1 && K <= ll::kMaxTopk, [&] {
    return std::string() + "topk_idx has " + to_string(K) + " columns; num_topk must be in [1, " +
           to_string(ll::kMaxTopk) + "]";
  });
  expect(E % R == 0, [&] { return std::string() + not_multiple(E, R); });
  expect(!in.use_ue8m0 || (in.use_fp8 && in.round_scale),
         [&] { return std::string() + "use_ue8m0 needs use_fp8=True and round_scale=True"; });
  expect(!in.use_ue8m0 || H % 512 == 0,
         [&] { return std::string() + "use_ue8m0 needs hidden to be a multiple of 512, got " + to_string(H); });
  const int64_t L = E / R;
  expect_optional(in.cumulative_recv_stats, "cumulative_local_expert_recv_stats", DType::kInt32, L, "num_local_experts",
                  dev);
  expect_optional(in.wait_recv_cost_stats, "dispatch_wait_recv_cost_stats", DType::kInt64, R, "num_ranks", dev);

  LLDispatchPlan p;
  p.g = validate_layout(T, H, E, buf);
  p.num_tokens = N;
  p.num_topk = K;
  const int64_t RT = R * T;
  p.recv_x = contiguous_spec(in.use_fp8 ? DType::kFloat8_e4m3fn : DType::kBFloat16, {L, RT, H});
  if (in.use_fp8) {
    p.recv_scales = in.use_ue8m0 ? column_major_scales(DType::kInt32, L, RT, H / (ll::kScaleGroup * ll::kUe8m0Pack))
                                 : column_major_scales(DType::kFloat32, L, RT, H / ll::kScaleGroup);
  }
  p.recv_count = contiguous_spec(DType::kInt32, {L});
  p.src_info = contiguous_spec(DType::kInt32, {L, RT}, p.g.handle_ints());
  p.layout_range = contiguous_spec(DType::kInt64, {L, R});
  return p;
}

void validate_dispatch_outputs(const LLDispatchPlan& p, const LLDispatchOut& out, const LLBufferInfo& buf) {
  expect_output(out.recv_x, p.recv_x, "recv_x", buf.device);
  if (p.recv_scales.present) {
    expect_output(out.recv_scales, p.recv_scales, "recv_scales", buf.device);
  } else {
    expect(!out.recv_scales.present(), [&] { return std::string() + "recv_scales must be left out without use_fp8"; });
  }
  expect_output(out.recv_count, p.recv_count, "recv_count", buf.device);
  expect_output(out.src_info, p.src_info, "src_info", buf.device);
  expect_output(out.layout_range, p.layout_range, "layout_range", buf.device);
}

LLCombinePlan validate_combine(const LLCombineIn& in, const LLBufferInfo& buf) {
  const int dev = buf.device, R = buf.num_ranks;
  const int64_t T = in.max_tokens, E = in.num_experts;
  expect(E % R == 0, [&] { return std::string() + not_multiple(E, R); });
  const int64_t L = E / R, RT = R * T;
  expect_tensor(in.x, "x", DType::kBFloat16, 3, dev);
  const int64_t H = in.x.shape[2];
  expect(in.x.shape[0] == L && in.x.shape[1] == RT, [&] {
    return std::string() + "x must have shape [num_local_experts=" + to_string(L) +
           ", num_ranks*num_max_dispatch_tokens_per_rank=" + to_string(RT) + ", hidden], got " + shape_str(in.x);
  });
  expect_tensor(in.topk_idx, "topk_idx", DType::kInt64, 2, dev);
  expect_tensor(in.topk_weights, "topk_weights", DType::kFloat32, 2, dev);
  const int64_t N = in.topk_idx.shape[0], K = in.topk_idx.shape[1];
  expect(in.topk_weights.shape[0] == N && in.topk_weights.shape[1] == K, [&] {
    return std::string() + "topk_weights must have the shape of topk_idx " + shape_str(in.topk_idx) + ", got " +
           shape_str(in.topk_weights);
  });
  expect(N <= T, [&] {
    return std::string() + "topk_idx has " + to_string(N) +
           " tokens, more than num_max_dispatch_tokens_per_rank=" + to_string(T);
  });
  expect(K >= 1 && K <= ll::kMaxTopk, [&] {
    return std::string() + "topk_idx has " + to_string(K) + " columns; num_topk must be in [1, " +
           to_string(ll::kMaxTopk) + "]";
  });
  expect_tensor(in.src_info, "handle src_info", DType::kInt32, 2, dev);
  expect(in.src_info.shape[0] == L && in.src_info.shape[1] == RT, [&] {
    return std::string() + "handle src_info has shape " + shape_str(in.src_info) + ", expected [" + to_string(L) +
           ", " + to_string(RT) + "]";
  });
  // The handle's storage (ll/layout.h) holds the top-k plane and the tail after the view.
  const int64_t handle_bytes = ll::Layout{T, H, R, E}.handle_ints() * 4;
  expect(in.src_info.storage_offset == 0 && in.src_info.storage_bytes >= handle_bytes, [&] {
    return std::string() +
           "handle was not produced by anyep low_latency_dispatch (src_info lacks the top-k slot plane)";
  });
  expect_tensor(in.layout_range, "handle layout_range", DType::kInt64, 2, dev);
  expect(in.layout_range.shape[0] == L && in.layout_range.shape[1] == R,
         [&] { return std::string() + "handle layout_range has shape " + shape_str(in.layout_range); });
  expect_optional(in.wait_recv_cost_stats, "combine_wait_recv_cost_stats", DType::kInt64, R, "num_ranks", dev);

  LLCombinePlan p;
  p.g = validate_layout(T, H, E, buf);
  p.num_tokens = N;
  p.num_topk = K;
  p.out = contiguous_spec(DType::kBFloat16, {N, H});
  return p;
}

void validate_combine_output(const LLCombinePlan& p, const TensorRef& out, const LLBufferInfo& buf) {
  expect_tensor(out, "out", DType::kBFloat16, 2, buf.device);
  expect(out.shape[0] == p.out.shape[0] && out.shape[1] == p.out.shape[1],
         [&] { return std::string() + "out must have shape " + dims_str(p.out.shape, 2) + ", got " + shape_str(out); });
}

void validate_topk_values(const int64_t* v, int64_t n, int64_t E) {
  if (n <= 0) return;
  // Plain values, not a structured binding: clang 14 cannot capture bindings in a lambda.
  const auto range = std::minmax_element(v, v + n);
  const int64_t mn = *range.first, mx = *range.second;
  expect(mn >= -1 && mx < E, [&] {
    return std::string() + "topk_idx holds values in [" + to_string(mn) + ", " + to_string(mx) +
           "], outside [-1, num_experts=" + to_string(E) + ")";
  });
}

void validate_mask_call(const LLBufferInfo& buf) {
  expect(buf.shrink, [&] { return std::string() + "rank masking needs a Buffer built with enable_shrink=True"; });
}

void validate_mask_rank(int64_t rank, const LLBufferInfo& buf) {
  validate_mask_call(buf);
  expect(rank >= 0 && rank < buf.num_ranks, [&] {
    return std::string() + "rank_to_mask=" + to_string(rank) + " is outside [0, num_ranks=" + to_string(buf.num_ranks) +
           ")";
  });
}

void validate_mask_status(const TensorRef& t, const LLBufferInfo& buf) {
  validate_mask_call(buf);
  expect_tensor(t, "mask_status", DType::kInt32, 1, buf.device);
  expect(t.shape[0] == buf.num_ranks, [&] {
    return std::string() + "mask_status must have num_ranks=" + to_string(buf.num_ranks) + " entries, got shape " +
           shape_str(t);
  });
}

}  // namespace anyep::runtime
