// The HT (normal mode) call contract without a GPU: the channel/ring geometry, the argument checks
// of get_dispatch_layout, dispatch and combine (each message names the argument), the output
// shapes, and the size hint covering every call it is meant for. Descriptors only.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error.h"
#include "runtime/ht/validate.h"

namespace anyep::runtime {
namespace {

constexpr int kDev = 0, R = 4;
constexpr int64_t N = 64, H = 1024, E = 16, K = 4;

HTBufferInfo buffer(int64_t bytes = int64_t{1} << 30) { return {1, R, kDev, bytes, 132}; }

TensorRef dev_tensor(DType dt, std::initializer_list<int64_t> shape) {
  return contiguous_ref(nullptr, dt, shape, kDev);
}

HTDispatchIn good_dispatch() {
  HTDispatchIn in;
  in.x = dev_tensor(DType::kBFloat16, {N, H});
  in.topk_idx = dev_tensor(DType::kInt64, {N, K});
  in.topk_weights = dev_tensor(DType::kFloat32, {N, K});
  in.num_tokens_per_rank = dev_tensor(DType::kInt32, {R});
  in.is_token_in_rank = dev_tensor(DType::kBool, {N, R});
  in.num_tokens_per_expert = dev_tensor(DType::kInt32, {E});
  in.config = HTConfig{24, 6, 256};
  return in;
}

// Runs f, expects InvalidArgument whose message contains `needle`.
void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HTGeometry, ChannelsLanesSlotsAndRanges) {
  ht::Geometry g;
  ASSERT_EQ(ht::make_geometry(4, 24, 6, 256, 4096, &g), nullptr);
  EXPECT_EQ(g.blocks, 12);
  EXPECT_EQ(g.lanes, ht::kWarps / 4);
  EXPECT_EQ(g.channels, 12 * g.lanes);
  EXPECT_EQ(g.slots, 256 / g.lanes);
  EXPECT_LE(g.chunk, g.slots / 2);
  EXPECT_EQ(g.total_bytes(), ht::kRingsOff + uint64_t(g.channels) * 4 * g.slots * 4096);
  // Channel ranges tile [0, n) in ascending order, whatever n.
  for (int n : {0, 1, 7, 100, 4096}) {
    EXPECT_EQ(g.range_begin(0, n), 0);
    EXPECT_EQ(g.range_begin(g.channels, n), n);
    for (int c = 0; c < g.channels; ++c) EXPECT_LE(g.range_begin(c, n), g.range_begin(c + 1, n));
  }
  // Ring (c, s) offsets do not overlap and stay inside total_bytes().
  EXPECT_EQ(g.ring_off(0, 1) - g.ring_off(0, 0), g.ring_bytes());
  EXPECT_EQ(g.ring_off(g.channels - 1, 3) + g.ring_bytes(), g.total_bytes());
}

TEST(HTGeometry, RefusesBadConfigs) {
  ht::Geometry g;
  EXPECT_NE(ht::make_geometry(4, 7, 6, 256, 64, &g), nullptr);    // odd SMs
  EXPECT_NE(ht::make_geometry(4, 24, 0, 256, 64, &g), nullptr);   // no send chunk
  EXPECT_NE(ht::make_geometry(17, 24, 6, 256, 64, &g), nullptr);  // beyond 16 ranks
  EXPECT_NE(ht::make_geometry(0, 24, 6, 256, 64, &g), nullptr);
  // Tiny rings still hold two slots and a sender publishes at most half a ring.
  ASSERT_EQ(ht::make_geometry(1, 2, 100, 2, 64, &g), nullptr);
  EXPECT_GE(g.slots, 2);
  EXPECT_EQ(g.chunk, 1);
}

TEST(HTLayout, OutputsAndChecks) {
  HTLayoutIn in;
  in.topk_idx = dev_tensor(DType::kInt64, {N, K});
  in.num_experts = E;
  const HTLayoutPlan p = validate_ht_layout(in, buffer());
  EXPECT_EQ(p.num_tokens_per_rank.shape[0], R);
  EXPECT_EQ(p.num_tokens_per_expert.shape[0], E);
  EXPECT_EQ(p.is_token_in_rank.dtype, DType::kBool);
  EXPECT_EQ(p.is_token_in_rank.shape[1], R);
  in.num_experts = 6;
  expect_invalid([&] { validate_ht_layout(in, buffer()); }, "num_experts=6");
  in.num_experts = E;
  in.topk_idx = dev_tensor(DType::kInt32, {N, K});
  expect_invalid([&] { validate_ht_layout(in, buffer()); }, "topk_idx must be Long");
}

TEST(HTDispatch, PlanAndOutputs) {
  const HTDispatchPlan p = validate_ht_dispatch(good_dispatch(), buffer());
  EXPECT_FALSE(p.cached);
  EXPECT_EQ(p.num_local_experts, E / R);
  EXPECT_EQ(p.x_bytes, 2 * H);
  EXPECT_EQ(p.rank_prefix_matrix.shape[0], R);
  EXPECT_EQ(p.channel_prefix_matrix.shape[1], p.g.channels);
  const HTDispatchOutSpecs o = ht_dispatch_outputs(p, 100, buffer());
  EXPECT_EQ(o.recv_x.shape[0], 100);
  EXPECT_EQ(o.recv_topk_idx.dtype, DType::kInt64);
  EXPECT_FALSE(o.recv_x_scales.present);
  EXPECT_EQ(o.send_head.shape[0], N);
  EXPECT_EQ(o.send_head.shape[1], R);
}

TEST(HTDispatch, FP8WithColumnMajorScales) {
  HTDispatchIn in = good_dispatch();
  in.x = dev_tensor(DType::kFloat8_e4m3fn, {N, H});
  in.x_scales = dev_tensor(DType::kFloat32, {N, H / 128});
  in.x_scales.strides[0] = 1;  // column-major, as DeepEP's test makes them
  in.x_scales.strides[1] = N;
  const HTDispatchPlan p = validate_ht_dispatch(in, buffer());
  EXPECT_EQ(p.num_scales, H / 128);
  EXPECT_EQ(p.scale_token_stride, 1);
  EXPECT_EQ(p.scale_hidden_stride, N);
  EXPECT_EQ(ht_dispatch_outputs(p, 5, buffer()).recv_x_scales.shape[1], H / 128);
  in.x_scales = TensorRef{};
  expect_invalid([&] { validate_ht_dispatch(in, buffer()); }, "needs its scales");
}

TEST(HTDispatch, EachBadArgumentIsNamed) {
  auto bad = [](const std::function<void(HTDispatchIn&)>& edit, const std::string& needle) {
    HTDispatchIn in = good_dispatch();
    edit(in);
    expect_invalid([&] { validate_ht_dispatch(in, buffer()); }, needle);
  };
  bad([](HTDispatchIn& in) { in.x = dev_tensor(DType::kFloat32, {N, H}); }, "x must be bfloat16");
  bad([](HTDispatchIn& in) { in.is_token_in_rank = dev_tensor(DType::kBool, {N, R + 1}); }, "is_token_in_rank");
  bad([](HTDispatchIn& in) { in.topk_weights = TensorRef{}; }, "topk_idx and topk_weights");
  bad([](HTDispatchIn& in) { in.topk_idx = dev_tensor(DType::kInt64, {N, 17}); }, "topk_weights");
  bad([](HTDispatchIn& in) { in.num_tokens_per_rank = dev_tensor(DType::kInt32, {R + 1}); }, "num_tokens_per_rank");
  bad([](HTDispatchIn& in) { in.num_tokens_per_expert = dev_tensor(DType::kInt32, {E + 1}); }, "num_tokens_per_expert");
  bad([](HTDispatchIn& in) { in.expert_alignment = 0; }, "expert_alignment");
  bad([](HTDispatchIn& in) { in.num_worst_tokens = -1; }, "num_worst_tokens");
  bad([](HTDispatchIn& in) { in.config.num_sms = 23; }, "Config.num_sms");
  bad([](HTDispatchIn& in) { in.config.num_sms = 200; }, "exceeds the device");
  bad([](HTDispatchIn& in) { in.config.chunk_recv = 1; }, "num_max_nvl_chunked_recv_tokens");
  bad([](HTDispatchIn& in) { in.x = dev_tensor(DType::kBFloat16, {N, 4}); }, "multiple of 16 bytes");
  // A buffer too small for the call says how many bytes it needs.
  HTDispatchIn in = good_dispatch();
  expect_invalid([&] { validate_ht_dispatch(in, buffer(1 << 20)); }, "get_nvl_buffer_size_hint");
}

TEST(HTDispatch, CachedCallTakesTheHandle) {
  HTDispatchIn in = good_dispatch();
  in.topk_idx = in.topk_weights = TensorRef{};
  in.num_tokens_per_rank = in.num_tokens_per_expert = TensorRef{};
  in.cached_rank_prefix_matrix = dev_tensor(DType::kInt32, {R, R});
  const HTDispatchPlan probe = validate_ht_dispatch(good_dispatch(), buffer());
  in.cached_channel_prefix_matrix = dev_tensor(DType::kInt32, {R, probe.g.channels});
  in.cached_num_recv_tokens = 10;
  EXPECT_TRUE(validate_ht_dispatch(in, buffer()).cached);
  in.cached_channel_prefix_matrix = dev_tensor(DType::kInt32, {R, probe.g.channels + 1});
  expect_invalid([&] { validate_ht_dispatch(in, buffer()); }, "channel_prefix_matrix");
}

TEST(HTCombine, PlanAndChecks) {
  const HTDispatchPlan d = validate_ht_dispatch(good_dispatch(), buffer());
  const int64_t M = 50;
  HTCombineIn in;
  in.x = dev_tensor(DType::kBFloat16, {M, H});
  in.topk_weights = dev_tensor(DType::kFloat32, {M, K});
  in.src_idx = dev_tensor(DType::kInt32, {M});
  in.rank_prefix_matrix = dev_tensor(DType::kInt32, {R, R});
  in.recv_channel_prefix_matrix = dev_tensor(DType::kInt32, {R, d.g.channels});
  in.send_head = dev_tensor(DType::kInt32, {N, R});
  in.bias0 = dev_tensor(DType::kBFloat16, {N, H});
  in.config = HTConfig{24, 6, 256};
  const HTCombinePlan p = validate_ht_combine(in, buffer());
  EXPECT_EQ(p.out.shape[0], N);
  EXPECT_EQ(p.out.shape[1], H);
  EXPECT_EQ(p.out_weights.shape[1], K);
  in.bias1 = dev_tensor(DType::kBFloat16, {N + 1, H});
  expect_invalid([&] { validate_ht_combine(in, buffer()); }, "bias[1]");
  in.bias1 = TensorRef{};
  in.x = dev_tensor(DType::kBFloat16, {M + 1, H});
  expect_invalid([&] { validate_ht_combine(in, buffer()); }, "recv_x layout");
}

TEST(HTSizeHint, CoversTheCallsItIsFor) {
  const int64_t hint = ht_size_hint(2 * H, R, 24, 256);
  // BF16 with top-k 16 and FP8 with scales at the same hidden both fit in the hint.
  HTDispatchIn in = good_dispatch();
  EXPECT_NO_THROW(validate_ht_dispatch(in, buffer(hint)));
  in.x = dev_tensor(DType::kFloat8_e4m3fn, {N, H});
  in.x_scales = dev_tensor(DType::kFloat32, {N, H / 128});
  EXPECT_NO_THROW(validate_ht_dispatch(in, buffer(hint)));
  expect_invalid([&] { validate_ht_dispatch(good_dispatch(), buffer(hint / 4)); }, "buffer too small");
  expect_invalid([] { ht_size_hint(100, R, 24, 256); }, "hidden_bytes");
}

}  // namespace
}  // namespace anyep::runtime
