// The LL call contract without a GPU: every argument check of dispatch and combine (the messages
// the Python extension and the C API both raise), and the output shapes a caller allocates.
// Descriptors only: no pointer is dereferenced.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/ll/validate.h"

namespace anyep::runtime {
namespace {

constexpr int kDev = 0, R = 2;
constexpr int64_t T = 8, H = 512, E = 4, K = 2, N = 6, L = E / R, RT = R * T;

LLBufferInfo buffer(int64_t bytes = -1) {
  return {R, kDev, bytes >= 0 ? bytes : static_cast<int64_t>(ll::Layout{T, 1024, R, E}.total_bytes())};
}

TensorRef dev_tensor(DType dt, std::initializer_list<int64_t> shape) {
  return contiguous_ref(nullptr, dt, shape, kDev);
}

LLDispatchIn good_dispatch() {
  LLDispatchIn in;
  in.x = dev_tensor(DType::kBFloat16, {N, H});
  in.topk_idx = dev_tensor(DType::kInt64, {N, K});
  in.max_tokens = T;
  in.num_experts = E;
  return in;
}

// A descriptor allocated as `spec` says (what a well-behaved caller passes).
TensorRef allocated(const OutputSpec& s) {
  TensorRef t;
  t.dtype = s.dtype;
  t.ndim = s.ndim;
  for (int d = 0; d < s.ndim; ++d) {
    t.shape[d] = s.shape[d];
    t.strides[d] = s.strides[d];
  }
  t.device = kDev;
  t.storage_bytes = s.storage_elems * dtype_bytes(s.dtype);
  return t;
}

LLDispatchOut outputs_for(const LLDispatchPlan& p) {
  LLDispatchOut o;
  o.recv_x = allocated(p.recv_x);
  if (p.recv_scales.present) o.recv_scales = allocated(p.recv_scales);
  o.recv_count = allocated(p.recv_count);
  o.src_info = allocated(p.src_info);
  o.layout_range = allocated(p.layout_range);
  return o;
}

LLCombineIn good_combine() {
  const LLDispatchPlan p = validate_dispatch(good_dispatch(), buffer());
  LLCombineIn in;
  in.x = dev_tensor(DType::kBFloat16, {L, RT, H});
  in.topk_idx = dev_tensor(DType::kInt64, {N, K});
  in.topk_weights = dev_tensor(DType::kFloat32, {N, K});
  in.src_info = allocated(p.src_info);
  in.layout_range = allocated(p.layout_range);
  in.max_tokens = T;
  in.num_experts = E;
  return in;
}

// `fn` throws InvalidArgument whose message holds every fragment (the argument's name first).
void expect_invalid(const std::function<void()>& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    for (const auto& f : fragments)
      EXPECT_NE(m.find(f), std::string::npos) << "message '" << m << "' lacks '" << f << "'";
    return;
  }
  ADD_FAILURE() << "expected InvalidArgument naming '" << fragments.front() << "'";
}

void dispatch_invalid(const LLDispatchIn& in, const std::vector<std::string>& fragments, LLBufferInfo b = buffer()) {
  expect_invalid([&] { validate_dispatch(in, b); }, fragments);
}

void combine_invalid(const LLCombineIn& in, const std::vector<std::string>& fragments) {
  expect_invalid([&] { validate_combine(in, buffer()); }, fragments);
}

// ---- dispatch: the plan ----------------------------------------------------------------------

TEST(LLValidateDispatch, PlanGivesDeepEPShapes) {
  const LLDispatchPlan p = validate_dispatch(good_dispatch(), buffer());
  EXPECT_EQ(p.num_tokens, N);
  EXPECT_EQ(p.num_topk, K);
  EXPECT_EQ(p.recv_x.dtype, DType::kFloat8_e4m3fn);  // use_fp8 is the default
  EXPECT_EQ(dims_str(p.recv_x.shape, p.recv_x.ndim), "[2, 16, 512]");
  // Column-major scales: view [L, R*T, H/128] over storage [L, H/128, R*T].
  ASSERT_TRUE(p.recv_scales.present);
  EXPECT_EQ(p.recv_scales.dtype, DType::kFloat32);
  EXPECT_EQ(dims_str(p.recv_scales.shape, 3), "[2, 16, 4]");
  EXPECT_EQ(dims_str(p.recv_scales.strides, 3), "[64, 1, 16]");
  EXPECT_EQ(p.recv_scales.storage_elems, L * 4 * RT);
  EXPECT_EQ(dims_str(p.recv_count.shape, 1), "[2]");
  // The handle: an [L, R*T] view at the start of two planes and the tail (ll/layout.h).
  EXPECT_EQ(dims_str(p.src_info.shape, 2), "[2, 16]");
  EXPECT_EQ(p.src_info.storage_elems, 2 * L * RT + ll::kHandleTail);
  EXPECT_EQ(p.src_info.storage_elems, p.g.handle_ints());
  EXPECT_EQ(dims_str(p.layout_range.shape, 2), "[2, 2]");
  EXPECT_EQ(p.layout_range.dtype, DType::kInt64);
  EXPECT_NO_THROW(validate_dispatch_outputs(p, outputs_for(p), buffer()));
}

TEST(LLValidateDispatch, Bf16HasNoScalesAndUe8m0PacksFourExponents) {
  LLDispatchIn in = good_dispatch();
  in.use_fp8 = false;
  const LLDispatchPlan bf16 = validate_dispatch(in, buffer());
  EXPECT_EQ(bf16.recv_x.dtype, DType::kBFloat16);
  EXPECT_FALSE(bf16.recv_scales.present);
  in.use_fp8 = in.round_scale = in.use_ue8m0 = true;
  const LLDispatchPlan ue = validate_dispatch(in, buffer());
  EXPECT_EQ(ue.recv_scales.dtype, DType::kInt32);
  EXPECT_EQ(dims_str(ue.recv_scales.shape, 3), "[2, 16, 1]");  // H / 512 words of 4 exponents
}

// ---- dispatch: bad inputs --------------------------------------------------------------------

TEST(LLValidateDispatch, WrongDtypeNamesTheArgument) {
  LLDispatchIn in = good_dispatch();
  in.x.dtype = DType::kFloat32;
  dispatch_invalid(in, {"x must be BFloat16", "got Float"});
  in = good_dispatch();
  in.topk_idx.dtype = DType::kInt32;
  dispatch_invalid(in, {"topk_idx must be Long", "got Int"});
}

TEST(LLValidateDispatch, WrongNumberOfDimensionsNamesTheArgument) {
  LLDispatchIn in = good_dispatch();
  in.x = dev_tensor(DType::kBFloat16, {H});
  dispatch_invalid(in, {"x must have 2 dimensions", "got shape [512]"});
  in = good_dispatch();
  in.topk_idx = dev_tensor(DType::kInt64, {1, N, K});
  dispatch_invalid(in, {"topk_idx must have 2 dimensions", "[1, 6, 2]"});
}

TEST(LLValidateDispatch, MissingWrongDeviceAndStridedInputsAreNamed) {
  LLDispatchIn in = good_dispatch();
  in.x = TensorRef{};
  dispatch_invalid(in, {"x is missing"});
  in = good_dispatch();
  in.topk_idx.device = -1;
  dispatch_invalid(in, {"topk_idx must be a CUDA tensor on device 0"});
  in = good_dispatch();
  in.x.strides[1] = 2;
  dispatch_invalid(in, {"x must be contiguous"});
}

TEST(LLValidateDispatch, MismatchedRows) {
  LLDispatchIn in = good_dispatch();
  in.topk_idx = dev_tensor(DType::kInt64, {N - 1, K});
  dispatch_invalid(in, {"topk_idx has 5 rows, x has 6"});
}

TEST(LLValidateDispatch, MoreTokensThanMaxTokens) {
  LLDispatchIn in = good_dispatch();
  in.x = dev_tensor(DType::kBFloat16, {T + 1, H});
  in.topk_idx = dev_tensor(DType::kInt64, {T + 1, K});
  dispatch_invalid(in, {"x has 9 tokens", "more than num_max_dispatch_tokens_per_rank=8"});
}

TEST(LLValidateDispatch, TopkColumnsOutsideOneToSixteen) {
  LLDispatchIn in = good_dispatch();
  in.topk_idx = dev_tensor(DType::kInt64, {N, 17});
  dispatch_invalid(in, {"topk_idx has 17 columns", "num_topk must be in [1, 16]"});
  in.topk_idx = dev_tensor(DType::kInt64, {N, 0});
  dispatch_invalid(in, {"topk_idx has 0 columns"});
  LLCombineIn c = good_combine();
  c.topk_idx = dev_tensor(DType::kInt64, {N, 17});
  c.topk_weights = dev_tensor(DType::kFloat32, {N, 17});
  combine_invalid(c, {"topk_idx has 17 columns"});
}

// The counts a caller that fills the kernel arguments itself passes (LowLatencyBuffer's
// next_dispatch_common): the same limits as a dispatch's tensors.
TEST(LLValidateCounts, TokensAndTopkWithinTheirLimits) {
  EXPECT_NO_THROW(validate_counts(T, 16, T));
  EXPECT_NO_THROW(validate_counts(0, 1, T));
  expect_invalid([] { validate_counts(T + 1, K, T); }, {"9 tokens", "num_max_dispatch_tokens_per_rank=8"});
  expect_invalid([] { validate_counts(-1, K, T); }, {"-1 tokens"});
  expect_invalid([] { validate_counts(N, 17, T); }, {"num_topk", "got 17"});
  expect_invalid([] { validate_counts(N, 0, T); }, {"num_topk", "got 0"});
}

TEST(LLValidateDispatch, ExpertsNotAMultipleOfRanks) {
  LLDispatchIn in = good_dispatch();
  in.num_experts = E + 1;
  dispatch_invalid(in, {"num_experts=5", "not a multiple of the number of ranks 2"});
}

TEST(LLValidateDispatch, Ue8m0NeedsFp8AndRoundScale) {
  LLDispatchIn in = good_dispatch();
  in.use_ue8m0 = true;  // round_scale off
  dispatch_invalid(in, {"use_ue8m0 needs use_fp8=True and round_scale=True"});
  in.round_scale = true;
  in.use_fp8 = false;
  dispatch_invalid(in, {"use_ue8m0 needs use_fp8=True and round_scale=True"});
}

TEST(LLValidateDispatch, Ue8m0NeedsHiddenMultipleOf512) {
  LLDispatchIn in = good_dispatch();
  in.use_fp8 = in.round_scale = in.use_ue8m0 = true;
  in.x = dev_tensor(DType::kBFloat16, {N, 384});
  dispatch_invalid(in, {"use_ue8m0 needs hidden to be a multiple of 512, got 384"});
}

TEST(LLValidateDispatch, ShapeAgainstLimitsAndBuffer) {
  LLDispatchIn in = good_dispatch();
  in.x = dev_tensor(DType::kBFloat16, {N, 100});
  dispatch_invalid(in, {"hidden must be a multiple of 128"});
  dispatch_invalid(good_dispatch(),
                   {"buffer too small", "tokens 8, hidden 512, experts 4", "get_low_latency_rdma_size_hint"},
                   buffer(1024));
}

TEST(LLValidateDispatch, OptionalStatsAreChecked) {
  LLDispatchIn in = good_dispatch();
  in.cumulative_recv_stats = dev_tensor(DType::kInt32, {L + 1});
  dispatch_invalid(in, {"cumulative_local_expert_recv_stats must have num_local_experts=2 entries"});
  in = good_dispatch();
  in.wait_recv_cost_stats = dev_tensor(DType::kInt32, {R});
  dispatch_invalid(in, {"dispatch_wait_recv_cost_stats must be Long"});
  in = good_dispatch();
  in.cumulative_recv_stats = dev_tensor(DType::kInt32, {L});
  in.wait_recv_cost_stats = dev_tensor(DType::kInt64, {R});
  EXPECT_NO_THROW(validate_dispatch(in, buffer()));
}

// ---- dispatch: bad outputs -------------------------------------------------------------------

TEST(LLValidateDispatch, OutputsMustMatchThePlan) {
  const LLDispatchPlan p = validate_dispatch(good_dispatch(), buffer());
  const auto bad = [&](const std::function<void(LLDispatchOut&)>& spoil, const std::vector<std::string>& fragments) {
    LLDispatchOut o = outputs_for(p);
    spoil(o);
    expect_invalid([&] { validate_dispatch_outputs(p, o, buffer()); }, fragments);
  };
  bad([](LLDispatchOut& o) { o.recv_x.dtype = DType::kBFloat16; }, {"recv_x must be Float8_e4m3fn", "got BFloat16"});
  bad([](LLDispatchOut& o) { o.recv_scales = TensorRef{}; }, {"recv_scales is missing"});
  bad(
      [](LLDispatchOut& o) {
        o.recv_scales = allocated(contiguous_spec(DType::kFloat32, {L, RT, 4}));
      },
      {"recv_scales must have strides [64, 1, 16]", "got [64, 4, 1]"});
  bad([](LLDispatchOut& o) { o.recv_count.shape[0] = 3; }, {"recv_count must have shape [2], got [3]"});
  bad([](LLDispatchOut& o) { o.layout_range.device = 1; }, {"layout_range must be a CUDA tensor on device 0"});
}

TEST(LLValidateDispatch, HandleStorageTooSmall) {
  const LLDispatchPlan p = validate_dispatch(good_dispatch(), buffer());
  LLDispatchOut o = outputs_for(p);
  o.src_info.storage_bytes = L * RT * 4;  // just the view: no top-k plane, no tail
  expect_invalid([&] { validate_dispatch_outputs(p, o, buffer()); },
                 {"src_info must start an allocation of at least " + std::to_string(p.g.handle_ints() * 4) + " bytes"});
  o = outputs_for(p);
  o.src_info.storage_offset = 16;
  expect_invalid([&] { validate_dispatch_outputs(p, o, buffer()); }, {"src_info", "view at element 16"});
}

// ---- combine ---------------------------------------------------------------------------------

TEST(LLValidateCombine, GoodCallPlansTheOutput) {
  const LLCombinePlan p = validate_combine(good_combine(), buffer());
  EXPECT_EQ(p.out.dtype, DType::kBFloat16);
  EXPECT_EQ(dims_str(p.out.shape, 2), "[6, 512]");
  EXPECT_NO_THROW(validate_combine_output(p, allocated(p.out), buffer()));
}

TEST(LLValidateCombine, WrongInputsNameTheArgument) {
  LLCombineIn in = good_combine();
  in.x = dev_tensor(DType::kBFloat16, {L, T, H});
  combine_invalid(
      in, {"x must have shape [num_local_experts=2, num_ranks*num_max_dispatch_tokens_per_rank=16", "[2, 8, 512]"});
  in = good_combine();
  in.topk_weights.dtype = DType::kFloat64;
  combine_invalid(in, {"topk_weights must be Float", "got Double"});
  in = good_combine();
  in.topk_weights = dev_tensor(DType::kFloat32, {N, K + 1});
  combine_invalid(in, {"topk_weights must have the shape of topk_idx [6, 2]", "got [6, 3]"});
  in = good_combine();
  in.topk_idx = dev_tensor(DType::kInt64, {T + 1, K});
  in.topk_weights = dev_tensor(DType::kFloat32, {T + 1, K});
  combine_invalid(in, {"topk_idx has 9 tokens", "num_max_dispatch_tokens_per_rank=8"});
  in = good_combine();
  in.num_experts = 3;
  combine_invalid(in, {"num_experts=3", "not a multiple"});
  in = good_combine();
  in.wait_recv_cost_stats = dev_tensor(DType::kInt64, {R + 1});
  combine_invalid(in, {"combine_wait_recv_cost_stats must have num_ranks=2 entries"});
}

TEST(LLValidateCombine, HandleOfWrongShape) {
  LLCombineIn in = good_combine();
  in.src_info = dev_tensor(DType::kInt32, {L, T});
  in.src_info.storage_bytes = 1 << 20;
  combine_invalid(in, {"handle src_info has shape [2, 8], expected [2, 16]"});
  in = good_combine();
  in.src_info.dtype = DType::kInt64;
  combine_invalid(in, {"handle src_info must be Int"});
  in = good_combine();
  in.layout_range = dev_tensor(DType::kInt64, {L, R + 1});
  combine_invalid(in, {"handle layout_range has shape [2, 3]"});
}

TEST(LLValidateCombine, HandleStorageTooSmall) {
  LLCombineIn in = good_combine();
  in.src_info.storage_bytes = L * RT * 4;  // a copy of the view (e.g. src_info.clone())
  combine_invalid(in, {"handle was not produced by anyep low_latency_dispatch", "top-k slot plane"});
  in = good_combine();
  in.src_info.storage_bytes -= 4;  // the tail cut short
  combine_invalid(in, {"handle was not produced by anyep low_latency_dispatch"});
  in = good_combine();
  in.src_info.storage_offset = 1;  // a view that does not start the handle
  combine_invalid(in, {"handle was not produced by anyep low_latency_dispatch"});
}

TEST(LLValidateCombine, OutMustFit) {
  const LLCombinePlan p = validate_combine(good_combine(), buffer());
  expect_invalid(
      [&] {
        validate_combine_output(p, dev_tensor(DType::kBFloat16, {N, H / 2}), buffer());
      },
      {"out must have shape [6, 512], got [6, 256]"});
  expect_invalid(
      [&] {
        validate_combine_output(p, dev_tensor(DType::kFloat32, {N, H}), buffer());
      },
      {"out must be BFloat16"});
}

// ---- topk values -----------------------------------------------------------------------------

TEST(LLValidateTopk, ValuesOutsideTheExpertRangeAreNamed) {
  const std::vector<int64_t> ok{0, 3, -1, 2}, high{0, 4, 1, 1}, low{-2, 0, 3, 1};
  EXPECT_NO_THROW(validate_topk_values(ok.data(), 4, E));
  EXPECT_NO_THROW(validate_topk_values(nullptr, 0, E));
  expect_invalid([&] { validate_topk_values(high.data(), 4, E); },
                 {"topk_idx holds values in [0, 4], outside [-1, num_experts=4)"});
  expect_invalid([&] { validate_topk_values(low.data(), 4, E); }, {"topk_idx holds values in [-2, 3]"});
}

// ---- rank masking (shrink mode) ----------------------------------------------------------------

LLBufferInfo shrink_buffer() {
  LLBufferInfo b = buffer();
  b.shrink = true;
  return b;
}

TEST(LLValidateMask, NeedsShrinkMode) {
  expect_invalid([] { validate_mask_call(buffer()); }, {"enable_shrink=True"});
  expect_invalid([] { validate_mask_rank(0, buffer()); }, {"enable_shrink=True"});
  expect_invalid([] { validate_mask_status(dev_tensor(DType::kInt32, {R}), buffer()); }, {"enable_shrink=True"});
  EXPECT_NO_THROW(validate_mask_call(shrink_buffer()));
}

TEST(LLValidateMask, RankOutOfRangeIsNamed) {
  EXPECT_NO_THROW(validate_mask_rank(0, shrink_buffer()));
  EXPECT_NO_THROW(validate_mask_rank(R - 1, shrink_buffer()));
  expect_invalid([] { validate_mask_rank(R, shrink_buffer()); }, {"rank_to_mask=2 is outside [0, num_ranks=2)"});
  expect_invalid([] { validate_mask_rank(-1, shrink_buffer()); }, {"rank_to_mask=-1"});
}

TEST(LLValidateMask, StatusTensorMustBeIntPerRank) {
  EXPECT_NO_THROW(validate_mask_status(dev_tensor(DType::kInt32, {R}), shrink_buffer()));
  expect_invalid([] { validate_mask_status(dev_tensor(DType::kInt64, {R}), shrink_buffer()); },
                 {"mask_status must be Int"});
  expect_invalid([] { validate_mask_status(dev_tensor(DType::kInt32, {R + 1}), shrink_buffer()); },
                 {"mask_status must have num_ranks=2 entries, got shape [3]"});
  expect_invalid(
      [] {
        validate_mask_status(dev_tensor(DType::kInt32, {1, R}), shrink_buffer());
      },
      {"mask_status must have 1 dimensions"});
  expect_invalid([] { validate_mask_status(contiguous_ref(nullptr, DType::kInt32, {R}, -1), shrink_buffer()); },
                 {"mask_status must be a CUDA tensor on device 0"});
  expect_invalid([] { validate_mask_status(TensorRef{}, shrink_buffer()); }, {"mask_status is missing"});
}

}  // namespace
}  // namespace anyep::runtime
