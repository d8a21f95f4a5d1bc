// anyep/src/runtime/ll/api.h — the LL runtime API: dispatch and combine over tensor descriptors
// (device pointers, dtypes, shapes; tensor_ref.h) and a CUDA stream. No torch: the Python
// extension converts tensors and maps errors, and the C API will sit on the same calls.
//
// A call: dispatch_outputs(buf, in) checks the inputs and says what to allocate, the caller
// allocates, dispatch(buf, in, plan, out, phases, stream) checks the outputs against that plan,
// takes the next buffer half and launches: every argument checked once, by ll/validate.h (one set
// of messages for every caller). dispatch(buf, in, out, ...) without a plan checks the inputs too. A staged call
// launches kPhaseSend and later launches kPhaseRecv through the returned LLCall.
#pragma once

#include "common/gpu_runtime.h"
#include "kernels/ll/kernels.h"
#include "runtime/ll/buffer.h"
#include "runtime/ll/validate.h"

namespace anyep::runtime {

// A checked call with its kernel arguments, bound to the buffer (which must outlive it).
class LLCall {
 public:
  LLCall(const LowLatencyBuffer& buf, const ll::DispatchArgs& a) : buf_(&buf), is_dispatch_(true), dispatch_(a) {}
  LLCall(const LowLatencyBuffer& buf, const ll::CombineArgs& a) : buf_(&buf), is_dispatch_(false), combine_(a) {}
  // Launches `phases` (ll::kPhaseSend, kPhaseRecv or kPhaseBoth) on `stream`; no sync, no allocation.
  void launch(int phases, cudaStream_t stream) const;

 private:
  const LowLatencyBuffer* buf_;
  bool is_dispatch_;
  ll::DispatchArgs dispatch_{};
  ll::CombineArgs combine_{};
};

// The outputs a dispatch needs, after checking its inputs. Throws InvalidArgument naming the argument.
LLDispatchPlan dispatch_outputs(const LowLatencyBuffer& buf, const LLDispatchIn& in);
// Checks inputs and outputs (shapes, dtypes, devices: host-side descriptors only, no sync); with
// ANYEP_LL_CHECK_INPUTS=1 also the topk_idx values (one device-to-host copy and a stream sync,
// skipped while `stream` captures a graph; without it the kernels refuse out-of-range experts and
// report them on the next call). Then launches `phases` (kPhaseSend: the caller launches
// kPhaseRecv later through the result, or kPhaseBoth).
LLCall dispatch(LowLatencyBuffer& buf, const LLDispatchIn& in, const LLDispatchOut& out, int phases,
                cudaStream_t stream);
// The same with `plan` = dispatch_outputs(buf, in) of this `in`: the inputs are not checked again.
LLCall dispatch(LowLatencyBuffer& buf, const LLDispatchIn& in, const LLDispatchPlan& plan, const LLDispatchOut& out,
                int phases, cudaStream_t stream);

// The output a combine needs (when the caller brings none), after checking its inputs.
LLCombinePlan combine_outputs(const LowLatencyBuffer& buf, const LLCombineIn& in);
LLCall combine(LowLatencyBuffer& buf, const LLCombineIn& in, const TensorRef& out, int phases, cudaStream_t stream);
// The same with `plan` = combine_outputs(buf, in) of this `in`: the inputs are not checked again.
LLCall combine(LowLatencyBuffer& buf, const LLCombineIn& in, const LLCombinePlan& plan, const TensorRef& out,
               int phases, cudaStream_t stream);

// Rank masking (DeepEP's low_latency_update/query/clean_mask_buffer; the buffer must be in shrink
// mode). Stream-ordered on `stream`, no host sync. Throws InvalidArgument naming the problem.
void update_mask(LowLatencyBuffer& buf, int64_t rank, bool masked, cudaStream_t stream);
// Copies the mask (Int [R], 1 = masked) into `mask_status`.
void query_mask(const LowLatencyBuffer& buf, const TensorRef& mask_status, cudaStream_t stream);
void clean_mask(LowLatencyBuffer& buf, cudaStream_t stream);

}  // namespace anyep::runtime
