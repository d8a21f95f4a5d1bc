#include "runtime/ht/validate.h"

#include <string>

#include "common/error.h"
#include "runtime/common/check.h"

namespace anyep::runtime {
namespace {

using std::to_string;

ht::Geometry geometry_or_throw(int R, const HTConfig& cfg, uint64_t slot_bytes, const HTBufferInfo& buf) {
  expect(cfg.num_sms >= 2 && cfg.num_sms % 2 == 0 && cfg.num_sms <= 2 * ht::kMaxChannels,
         [&] { return "Config.num_sms must be a positive even number, got " + to_string(cfg.num_sms); });
  expect(buf.device_sms <= 0 || cfg.num_sms <= buf.device_sms, [&] {
    return "Config.num_sms=" + to_string(cfg.num_sms) + " exceeds the device's " + to_string(buf.device_sms) +
           " SMs (sender and receiver blocks must run at once)";
  });
  expect(cfg.chunk_send >= 1 && cfg.chunk_send <= (1 << 20), [&] {
    return "Config.num_max_nvl_chunked_send_tokens must be in [1, 1048576], got " + to_string(cfg.chunk_send);
  });
  expect(cfg.chunk_recv >= 2 && cfg.chunk_recv <= (1 << 20), [&] {
    return "Config.num_max_nvl_chunked_recv_tokens must be in [2, 1048576], got " + to_string(cfg.chunk_recv);
  });
  ht::Geometry g;
  if (const char* why = ht::make_geometry(R, static_cast<int>(cfg.num_sms), static_cast<int>(cfg.chunk_send),
                                          static_cast<int>(cfg.chunk_recv), slot_bytes, &g))
    throw InvalidArgument(std::string("anyep HT: ") + why);
  expect(static_cast<int64_t>(g.total_bytes()) <= buf.num_bytes, [&] {
    return "anyep HT: buffer too small: this call (" + to_string(g.channels) + " channels x " + to_string(R) +
           " ranks x " + to_string(g.slots) + " slots of " + to_string(g.slot_bytes) + " bytes) needs " +
           to_string(g.total_bytes()) + " bytes, num_nvl_bytes is " + to_string(buf.num_bytes) +
           " (see Config.get_nvl_buffer_size_hint)";
  });
  return g;
}

// A handle's channel matrix: its columns are the channels of the dispatch that made it, which a
// later call must match (same ranks, same Config.num_sms).
void expect_channels(const TensorRef& t, const char* name, const ht::Geometry& g, int64_t num_sms, int device) {
  expect_tensor(t, name, DType::kInt32, 2, device);
  expect(t.shape[0] == g.R && t.shape[1] == g.channels, [&] {
    return std::string(name) + " has shape " + shape_str(t) + ", but Config.num_sms=" + to_string(num_sms) +
           " gives [" + to_string(g.R) + ", " + to_string(g.channels) +
           "]: use the num_sms of the dispatch that made the handle (" + to_string(t.shape[1] / g.lanes * 2) + ")";
  });
}

void expect_matrix(const TensorRef& t, const char* name, int64_t rows, int64_t cols, int device) {
  expect_tensor(t, name, DType::kInt32, 2, device);
  expect(t.shape[0] == rows && t.shape[1] == cols, [&] {
    return std::string(name) + " must have shape [" + to_string(rows) + ", " + to_string(cols) + "], got " +
           shape_str(t);
  });
}

}  // namespace

HTLayoutPlan validate_ht_layout(const HTLayoutIn& in, const HTBufferInfo& buf) {
  const int R = buf.num_ranks;
  expect_tensor(in.topk_idx, "topk_idx", DType::kInt64, 2, buf.device);
  const int64_t N = in.topk_idx.shape[0], K = in.topk_idx.shape[1], E = in.num_experts;
  expect(K >= 1 && K <= ht::kMaxTopk,
         [&] { return "topk_idx has " + to_string(K) + " columns; num_topk must be in [1, 16]"; });
  expect(E > 0 && E % R == 0, [&] {
    return "num_experts=" + to_string(E) + " must be a positive multiple of the number of ranks " + to_string(R);
  });
  expect(N < (int64_t{1} << 31) / R, [&] { return "topk_idx has too many rows: " + to_string(N); });
  HTLayoutPlan p;
  p.num_tokens = N;
  p.num_topk = K;
  p.num_tokens_per_rank = contiguous_spec(DType::kInt32, {R});
  p.num_tokens_per_expert = contiguous_spec(DType::kInt32, {E});
  p.is_token_in_rank = contiguous_spec(DType::kBool, {N, R});
  return p;
}

HTDispatchPlan validate_ht_dispatch(const HTDispatchIn& in, const HTBufferInfo& buf) {
  const int R = buf.num_ranks, dev = buf.device;
  HTDispatchPlan p;
  expect(in.x.present(), [] { return std::string("x is missing"); });
  const bool fp8 = in.x.dtype == DType::kFloat8_e4m3fn;
  expect(in.x.dtype == DType::kBFloat16 || fp8, [&] {
    return std::string("x must be bfloat16, or float8_e4m3fn with scales (a tuple), got ") + dtype_name(in.x.dtype);
  });
  expect_tensor(in.x, "x", in.x.dtype, 2, dev);
  const int64_t N = in.x.shape[0], H = in.x.shape[1];
  p.num_tokens = N;
  p.hidden = H;
  p.x_dtype = in.x.dtype;
  p.x_bytes = H * dtype_bytes(in.x.dtype);
  expect(H > 0 && p.x_bytes % 16 == 0,
         [&] { return "x's row must be a multiple of 16 bytes, got hidden " + to_string(H); });
  expect(N < (int64_t{1} << 31) / (R > 0 ? R : 1), [&] { return "x has too many rows: " + to_string(N); });
  if (fp8) {
    expect(in.x_scales.present(), [] { return std::string("FP8 x needs its scales (pass x as (x, x_scales))"); });
    expect(in.x_scales.dtype == DType::kFloat32 || in.x_scales.dtype == DType::kInt32, [&] {
      return std::string("x_scales must be float32 (or int32 packed UE8M0), got ") + dtype_name(in.x_scales.dtype);
    });
    expect(in.x_scales.ndim == 2 && in.x_scales.shape[0] == N && in.x_scales.shape[1] >= 1, [&] {
      return "x_scales must have shape [" + to_string(N) + ", num_scales], got " + shape_str(in.x_scales);
    });
    expect(in.x_scales.device == dev, [&] { return "x_scales must be a CUDA tensor on device " + to_string(dev); });
    p.num_scales = in.x_scales.shape[1];
    p.scale_token_stride = in.x_scales.strides[0];
    p.scale_hidden_stride = in.x_scales.strides[1];
    p.scales_dtype = in.x_scales.dtype;
  } else {
    expect(!in.x_scales.present(),
           [] { return std::string("x_scales given but x is bfloat16 (scales are FP8 only)"); });
  }
  expect_tensor(in.is_token_in_rank, "is_token_in_rank", DType::kBool, 2, dev);
  expect(in.is_token_in_rank.shape[0] == N && in.is_token_in_rank.shape[1] == R, [&] {
    return "is_token_in_rank must have shape [" + to_string(N) + ", " + to_string(R) + "], got " +
           shape_str(in.is_token_in_rank);
  });
  expect(in.topk_idx.present() == in.topk_weights.present(),
         [] { return std::string("topk_idx and topk_weights must be given together"); });
  p.cached = in.cached_rank_prefix_matrix.present();
  if (p.cached) {
    expect(!in.topk_idx.present(), [] { return std::string("a cached dispatch (handle given) takes no topk_idx"); });
    expect(in.num_worst_tokens == 0,
           [] { return std::string("num_worst_tokens needs a dispatch with topk_idx (no handle)"); });
    expect(in.cached_num_recv_tokens >= 0,
           [&] { return "the handle's recv_src_idx has a negative size " + to_string(in.cached_num_recv_tokens); });
  } else {
    expect_tensor(in.num_tokens_per_rank, "num_tokens_per_rank", DType::kInt32, 1, dev);
    expect(in.num_tokens_per_rank.shape[0] == R, [&] {
      return "num_tokens_per_rank must have " + to_string(R) + " entries, got " + shape_str(in.num_tokens_per_rank);
    });
    expect_tensor(in.num_tokens_per_expert, "num_tokens_per_expert", DType::kInt32, 1, dev);
    const int64_t E = in.num_tokens_per_expert.shape[0];
    expect(E > 0 && E % R == 0, [&] {
      return "num_tokens_per_expert has " + to_string(E) + " entries, not a positive multiple of the number of ranks " +
             to_string(R);
    });
    expect(E / R <= ht::kMaxLocalExperts,
           [&] { return "num_experts / num_ranks = " + to_string(E / R) + " exceeds 1024 local experts"; });
    p.num_experts = E;
    p.num_local_experts = E / R;
  }
  if (in.topk_idx.present()) {
    expect_tensor(in.topk_idx, "topk_idx", DType::kInt64, 2, dev);
    expect_tensor(in.topk_weights, "topk_weights", DType::kFloat32, 2, dev);
    const int64_t K = in.topk_idx.shape[1];
    expect(in.topk_idx.shape[0] == N && in.topk_weights.shape[0] == N && in.topk_weights.shape[1] == K, [&] {
      return "topk_idx " + shape_str(in.topk_idx) + " and topk_weights " + shape_str(in.topk_weights) +
             " must both be [" + to_string(N) + ", num_topk]";
    });
    expect(K >= 1 && K <= ht::kMaxTopk, [&] { return "num_topk must be in [1, 16], got " + to_string(K); });
    p.num_topk = K;
  }
  expect(in.expert_alignment >= 1 && in.expert_alignment <= (1 << 20),
         [&] { return "expert_alignment must be in [1, 1048576], got " + to_string(in.expert_alignment); });
  expect(in.num_worst_tokens >= 0,
         [&] { return "num_worst_tokens must be >= 0, got " + to_string(in.num_worst_tokens); });
  expect(in.num_worst_tokens == 0 || in.topk_idx.present(),
         [] { return std::string("num_worst_tokens needs topk_idx and topk_weights"); });
  p.g = geometry_or_throw(
      R, in.config,
      ht::dispatch_slot_bytes(uint64_t(p.x_bytes), static_cast<int>(p.num_scales), static_cast<int>(p.num_topk)), buf);
  if (p.cached) {
    expect_matrix(in.cached_rank_prefix_matrix, "handle rank_prefix_matrix", R, R, dev);
    expect_channels(in.cached_channel_prefix_matrix, "handle channel_prefix_matrix", p.g, in.config.num_sms, dev);
  } else {
    p.rank_prefix_matrix = contiguous_spec(DType::kInt32, {R, R});
    p.channel_prefix_matrix = contiguous_spec(DType::kInt32, {R, p.g.channels});
  }
  return p;
}

HTDispatchOutSpecs ht_dispatch_outputs(const HTDispatchPlan& p, int64_t M, const HTBufferInfo& buf) {
  HTDispatchOutSpecs o;
  const int R = buf.num_ranks;
  o.recv_x = contiguous_spec(p.x_dtype, {M, p.hidden});
  if (p.num_scales > 0) o.recv_x_scales = contiguous_spec(p.scales_dtype, {M, p.num_scales});
  if (p.num_topk > 0) {
    o.recv_topk_idx = contiguous_spec(DType::kInt64, {M, p.num_topk});
    o.recv_topk_weights = contiguous_spec(DType::kFloat32, {M, p.num_topk});
  }
  o.recv_channel_prefix_matrix = contiguous_spec(DType::kInt32, {R, p.g.channels});
  o.recv_src_idx = contiguous_spec(DType::kInt32, {M});
  o.send_head = contiguous_spec(DType::kInt32, {p.num_tokens, R});
  return o;
}

HTCombinePlan validate_ht_combine(const HTCombineIn& in, const HTBufferInfo& buf) {
  const int R = buf.num_ranks, dev = buf.device;
  HTCombinePlan p;
  expect_tensor(in.x, "x", DType::kBFloat16, 2, dev);
  const int64_t M = in.x.shape[0], H = in.x.shape[1];
  expect(H > 0 && (2 * H) % 16 == 0, [&] { return "x's hidden must be a multiple of 8, got " + to_string(H); });
  expect_tensor(in.send_head, "handle send_head", DType::kInt32, 2, dev);
  const int64_t N = in.send_head.shape[0];
  expect(in.send_head.shape[1] == R,
         [&] { return "handle send_head must have " + to_string(R) + " columns, got " + shape_str(in.send_head); });
  expect_tensor(in.src_idx, "handle recv_src_idx", DType::kInt32, 1, dev);
  expect(in.src_idx.shape[0] == M, [&] {
    return "x has " + to_string(M) + " rows but the handle's dispatch received " + to_string(in.src_idx.shape[0]) +
           " (combine takes the dispatch's recv_x layout)";
  });
  expect_matrix(in.rank_prefix_matrix, "handle rank_prefix_matrix", R, R, dev);
  if (in.topk_weights.present()) {
    expect_tensor(in.topk_weights, "topk_weights", DType::kFloat32, 2, dev);
    expect(in.topk_weights.shape[0] == M && in.topk_weights.shape[1] >= 1 && in.topk_weights.shape[1] <= ht::kMaxTopk,
           [&] {
             return "topk_weights must have shape [" + to_string(M) + ", num_topk <= 16], got " +
                    shape_str(in.topk_weights);
           });
    p.num_topk = in.topk_weights.shape[1];
  }
  const TensorRef* biases[2] = {&in.bias0, &in.bias1};
  const char* bias_names[2] = {"bias[0]", "bias[1]"};
  for (int i = 0; i < 2; ++i) {
    if (!biases[i]->present()) continue;
    expect_tensor(*biases[i], bias_names[i], DType::kBFloat16, 2, dev);
    expect(biases[i]->shape[0] == N && biases[i]->shape[1] == H, [&] {
      return std::string(bias_names[i]) + " must have shape [" + to_string(N) + ", " + to_string(H) + "], got " +
             shape_str(*biases[i]);
    });
  }
  p.num_recv = M;
  p.num_tokens = N;
  p.hidden = H;
  p.g = geometry_or_throw(R, in.config, ht::combine_slot_bytes(H, static_cast<int>(p.num_topk)), buf);
  expect_channels(in.recv_channel_prefix_matrix, "handle recv_channel_prefix_matrix", p.g, in.config.num_sms, dev);
  p.out = contiguous_spec(DType::kBFloat16, {N, H});
  if (p.num_topk > 0) p.out_weights = contiguous_spec(DType::kFloat32, {N, p.num_topk});
  return p;
}

int64_t ht_size_hint(int64_t hidden_bytes, int64_t num_ranks, int64_t num_sms, int64_t chunk_recv) {
  if (hidden_bytes <= 0 || hidden_bytes % 16 != 0)
    throw InvalidArgument("anyep HT size hint: hidden_bytes must be a positive multiple of 16, got " +
                          to_string(hidden_bytes));
  // The largest slot a call can use: the payload, FP8 scales (one per 128 one-byte elements) and
  // top-k 16 (a BF16 row of the same hidden_bytes has no scales and half the elements).
  const uint64_t slot =
      ht::dispatch_slot_bytes(uint64_t(hidden_bytes), static_cast<int>(hidden_bytes / 128), ht::kMaxTopk);
  ht::Geometry g;
  if (const char* why = ht::make_geometry(static_cast<int>(num_ranks), static_cast<int>(num_sms), 1,
                                          static_cast<int>(chunk_recv), slot, &g))
    throw InvalidArgument(std::string("anyep HT size hint: ") + why);
  return static_cast<int64_t>(g.total_bytes());
}

}  // namespace anyep::runtime
