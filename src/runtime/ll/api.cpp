#include "runtime/ll/api.h"

#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/error.h"

namespace anyep::runtime {
namespace {

constexpr const char* kWho = "anyep LL";  // what cuda_check's messages start with

void expect_first_phases(int phases) {
  if (phases != ll::kPhaseSend && phases != ll::kPhaseBoth)
    throw InvalidArgument("anyep LL: a call starts with phases kPhaseSend or kPhaseBoth, got " +
                          std::to_string(phases));
}

// The host check of topk_idx values, opt-in (ANYEP_LL_CHECK_INPUTS=1: it costs a copy and a
// stream sync per call); skipped while capturing (no sync allowed there). The kernels refuse
// out-of-range entries either way (kErrBadExpert, raised by the next call).
void check_topk_values(const LowLatencyBuffer& buf, const TensorRef& topk_idx, int64_t E, cudaStream_t stream) {
  const int64_t n = topk_idx.numel();
  if (!buf.check_inputs() || n == 0) return;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &st);
  if (st != cudaStreamCaptureStatusNone) return;
  std::vector<int64_t> host(static_cast<size_t>(n));
  cuda_check(cudaSetDevice(buf.device()), kWho, "cudaSetDevice");
  cuda_check(cudaMemcpyAsync(host.data(), topk_idx.data, static_cast<size_t>(n) * sizeof(int64_t),
                             cudaMemcpyDeviceToHost, stream),
             kWho, "copy topk_idx to the host for the value check");
  cuda_check(cudaStreamSynchronize(stream), kWho, "synchronize for the topk_idx value check");
  validate_topk_values(host.data(), n, E);
}

}  // namespace

void LLCall::launch(int phases, cudaStream_t stream) const {
  if (is_dispatch_)
    buf_->launch(dispatch_, phases, stream);
  else
    buf_->launch(combine_, phases, stream);
}

LLDispatchPlan dispatch_outputs(const LowLatencyBuffer& buf, const LLDispatchIn& in) {
  return validate_dispatch(in, buf.info());
}

LLCall dispatch(LowLatencyBuffer& buf, const LLDispatchIn& in, const LLDispatchOut& out, int phases,
                cudaStream_t stream) {
  return dispatch(buf, in, validate_dispatch(in, buf.info()), out, phases, stream);
}

LLCall dispatch(LowLatencyBuffer& buf, const LLDispatchIn& in, const LLDispatchPlan& p, const LLDispatchOut& out,
                int phases, cudaStream_t stream) {
  expect_first_phases(phases);
  validate_dispatch_outputs(p, out, buf.info());
  check_topk_values(buf, in.topk_idx, in.num_experts, stream);

  ll::DispatchArgs a;
  a.c = buf.next_dispatch_common(p);
  a.x = in.x.data;
  a.topk_idx = static_cast<const int64_t*>(in.topk_idx.data);
  a.fmt = !in.use_fp8 ? ll::Format::kBF16 : (in.use_ue8m0 ? ll::Format::kFP8UE8M0 : ll::Format::kFP8);
  a.round_scale = in.round_scale;
  a.recv_x = out.recv_x.data;
  a.recv_scales = in.use_fp8 ? out.recv_scales.data : nullptr;
  a.recv_count = static_cast<int32_t*>(out.recv_count.data);
  int32_t* handle = static_cast<int32_t*>(out.src_info.data);  // start of the handle's storage
  a.src_info = handle + p.g.handle_src_info_off();
  a.src_topk = handle + p.g.handle_src_topk_off();
  a.handle_half = handle + p.g.handle_half_off();
  a.layout_range = static_cast<int64_t*>(out.layout_range.data);
  a.cumulative_recv_stats = static_cast<int32_t*>(in.cumulative_recv_stats.data);
  a.wait_recv_cost_stats = static_cast<int64_t*>(in.wait_recv_cost_stats.data);
  LLCall call(buf, a);
  call.launch(phases, stream);
  return call;
}

LLCombinePlan combine_outputs(const LowLatencyBuffer& buf, const LLCombineIn& in) {
  return validate_combine(in, buf.info());
}

LLCall combine(LowLatencyBuffer& buf, const LLCombineIn& in, const TensorRef& out, int phases, cudaStream_t stream) {
  return combine(buf, in, validate_combine(in, buf.info()), out, phases, stream);
}

LLCall combine(LowLatencyBuffer& buf, const LLCombineIn& in, const LLCombinePlan& p, const TensorRef& out, int phases,
               cudaStream_t stream) {
  expect_first_phases(phases);
  validate_combine_output(p, out, buf.info());
  check_topk_values(buf, in.topk_idx, in.num_experts, stream);

  ll::CombineArgs a;
  a.c = buf.next_combine_common(p);
  a.x = in.x.data;
  const int32_t* handle = static_cast<const int32_t*>(in.src_info.data);  // storage_offset 0: the handle's start
  a.src_info = handle + p.g.handle_src_info_off();
  a.src_topk = handle + p.g.handle_src_topk_off();
  a.handle_half = handle + p.g.handle_half_off();
  a.layout_range = static_cast<const int64_t*>(in.layout_range.data);
  a.topk_idx = static_cast<const int64_t*>(in.topk_idx.data);
  a.topk_weights = static_cast<const float*>(in.topk_weights.data);
  a.out = out.data;
  a.wait_recv_cost_stats = static_cast<int64_t*>(in.wait_recv_cost_stats.data);
  a.logfmt = in.use_logfmt;
  LLCall call(buf, a);
  call.launch(phases, stream);
  return call;
}

void update_mask(LowLatencyBuffer& buf, int64_t rank, bool masked, cudaStream_t stream) {
  validate_mask_rank(rank, buf.info());
  buf.set_mask(static_cast<int>(rank), masked, stream);
}

void query_mask(const LowLatencyBuffer& buf, const TensorRef& mask_status, cudaStream_t stream) {
  validate_mask_status(mask_status, buf.info());
  buf.copy_mask(static_cast<int32_t*>(mask_status.data), stream);
}

void clean_mask(LowLatencyBuffer& buf, cudaStream_t stream) {
  validate_mask_call(buf.info());
  buf.clear_mask(stream);
}

}  // namespace anyep::runtime
