// The C API's per-forward-pass handle: created from topk_idx, filled by dispatch, read by
// combine; anyep_complete launches the receive phase of a send-only call.
#include <string>

#include "anyep/anyep.h"
#include "capi/api_guard.h"
#include "capi/objects.h"
#include "common/error.h"
#include "runtime/ll/validate.h"

namespace anyep::capi {
namespace {

using std::to_string;

constexpr uint32_t kKnownCallFlags = ANYEP_SEND_ONLY;
constexpr size_t kRangeAlign = 256;  // layout_range starts on its own aligned block of the handle memory

[[noreturn]] void no_gpu(const char* call) {
  throw Unsupported(std::string("no GPU: this group was created GPU-free (cfg->device = ANYEP_DEVICE_NONE); ") + call +
                    " needs a GPU (every argument check passed)");
}

void check_flags(uint32_t flags) {
  if (flags & ~kKnownCallFlags)
    throw InvalidArgument("flags has unknown bits " + to_string(flags & ~kKnownCallFlags) +
                          " (known: ANYEP_SEND_ONLY)");
}

void expect_nothing_staged(const Handle& h) {
  if (h.pending)
    throw InvalidArgument(std::string("the handle's send-only ") + h.pending_what +
                          " has not been completed: call anyep_complete first");
}

std::shared_ptr<Handle> create(anyep_group_t group, int32_t mode, const anyep_tensor_t* topk_idx) {
  auto h = std::make_shared<Handle>();
  h->group = groups().get(id_of(group));
  const Group& g = *h->group;
  const GroupSpec& s = g.spec;
  if (mode == ANYEP_MODE_HT)
    throw InvalidArgument(
        "mode is ANYEP_MODE_HT: HT handles come from anyep_ht_handle_create (their counts exchange needs a stream "
        "and options)");
  if (mode != ANYEP_MODE_LL)
    throw InvalidArgument("mode is " + to_string(mode) + ": anyep_handle_create makes ANYEP_MODE_LL (1) handles");
  g.expect_mode(ANYEP_MODE_LL);
  h->mode = ANYEP_MODE_LL;
  h->topk_idx = tensor_ref(topk_idx, "topk_idx");
  const runtime::TensorRef& t = h->topk_idx;
  if (t.dtype != runtime::DType::kInt64)
    throw InvalidArgument(std::string("topk_idx must be ANYEP_INT64, got ") + c_dtype_name(to_c_dtype(t.dtype)));
  if (t.ndim != 2)
    throw InvalidArgument("topk_idx must have 2 dimensions [num_tokens, num_topk], got shape " + runtime::shape_str(t));
  if (!t.contiguous()) throw InvalidArgument("topk_idx must be contiguous");
  h->num_tokens = t.shape[0];
  h->num_topk = t.shape[1];
  if (h->num_tokens > s.max_tokens)
    throw InvalidArgument("topk_idx has " + to_string(h->num_tokens) +
                          " tokens, more than the group's max_tokens_per_rank=" + to_string(s.max_tokens));
  if (h->num_topk < 1 || h->num_topk > ll::kMaxTopk)
    throw InvalidArgument("topk_idx has " + to_string(h->num_topk) + " experts per token, outside [1, " +
                          to_string(ll::kMaxTopk) + "]");
  if (g.ll && t.device != g.device)
    throw InvalidArgument("topk_idx is on device " + to_string(t.device) + ", the group's device is " +
                          to_string(g.device));

  // Handle memory: the storage the dispatch's src_info views (ll/layout.h), then layout_range [L, R].
  const ll::Layout lay{s.max_tokens, s.hidden, s.num_ranks, s.num_experts};
  const int64_t L = lay.L(), R = s.num_ranks, RT = R * s.max_tokens;
  const size_t info_bytes = static_cast<size_t>(lay.handle_ints()) * 4;
  const size_t range_off = (info_bytes + kRangeAlign - 1) / kRangeAlign * kRangeAlign;
  const size_t range_bytes = static_cast<size_t>(L * R) * 8;
  h->memory_bytes = range_off + range_bytes;
  const int dev = g.ll ? g.device : t.device;
  if (g.ll) alloc_handle_memory(*h, h->memory_bytes, dev);
  // A GPU-free handle has descriptors without memory: every check of a call runs all the same.
  static int64_t no_memory = 0;
  auto* base = h->memory ? static_cast<uint8_t*>(h->memory) : reinterpret_cast<uint8_t*>(&no_memory);
  h->src_info = runtime::contiguous_ref(base, runtime::DType::kInt32, {L, RT}, dev);
  h->src_info.storage_bytes = static_cast<int64_t>(info_bytes);
  h->layout_range = runtime::contiguous_ref(base + range_off, runtime::DType::kInt64, {L, R}, dev);
  h->layout_range.storage_bytes = static_cast<int64_t>(range_bytes);
  return h;
}

void dispatch(anyep_handle_t handle, const anyep_tensor_t* x, const anyep_tensor_t* recv_x,
              const anyep_tensor_t* recv_scales, const anyep_tensor_t* recv_count, uint32_t flags, void* stream) {
  std::shared_ptr<Handle> h = live_handle(handle, ANYEP_MODE_LL, "anyep_dispatch");
  Group& g = *h->group;
  const GroupSpec& s = g.spec;
  check_flags(flags);
  expect_nothing_staged(*h);
  runtime::LLDispatchIn in;
  in.x = tensor_ref(x, "x");
  if (in.x.ndim == 2 && in.x.shape[1] != s.hidden)
    throw InvalidArgument("x has hidden " + to_string(in.x.shape[1]) +
                          " (x.shape[1]); the group was created with hidden " + to_string(s.hidden));
  in.topk_idx = h->topk_idx;
  in.max_tokens = s.max_tokens;
  in.num_experts = s.num_experts;
  in.use_fp8 = s.fp8();
  in.round_scale = s.round_scale;
  in.use_ue8m0 = s.ue8m0;
  runtime::LLDispatchOut out;
  out.recv_x = tensor_ref(recv_x, "recv_x");
  if (s.fp8()) {
    out.recv_scales = tensor_ref(recv_scales, "recv_scales");
  } else if (recv_scales) {
    throw InvalidArgument("recv_scales must be NULL: the group's dispatch_dtype is ANYEP_BFLOAT16 (no scales)");
  }
  out.recv_count = tensor_ref(recv_count, "recv_count");
  out.src_info = h->src_info;
  out.layout_range = h->layout_range;
  const bool send_only = flags & ANYEP_SEND_ONLY;
  if (!g.ll) {
    const runtime::LLBufferInfo info = g.info(in.x.device);
    runtime::validate_dispatch_outputs(runtime::validate_dispatch(in, info), out, info);
    no_gpu("anyep_dispatch");
  }
  RecvPhase recv = g.ll->dispatch(in, out, send_only, stream);
  h->dispatched = true;
  h->pending = std::move(recv);
  h->pending_what = h->pending ? "dispatch" : nullptr;
}

void combine(anyep_handle_t handle, const anyep_tensor_t* expert_x, const anyep_tensor_t* topk_weights,
             const anyep_tensor_t* out_c, uint32_t flags, void* stream) {
  std::shared_ptr<Handle> h = live_handle(handle, ANYEP_MODE_LL, "anyep_combine");
  Group& g = *h->group;
  const GroupSpec& s = g.spec;
  check_flags(flags);
  expect_nothing_staged(*h);
  runtime::LLCombineIn in;
  in.x = tensor_ref(expert_x, "expert_x");
  in.topk_idx = h->topk_idx;
  in.topk_weights = tensor_ref(topk_weights, "topk_weights");
  in.src_info = h->src_info;
  in.layout_range = h->layout_range;
  in.max_tokens = s.max_tokens;
  in.num_experts = s.num_experts;
  const runtime::TensorRef out = tensor_ref(out_c, "out");
  if (in.x.ndim == 3 && in.x.shape[2] != s.hidden)
    throw InvalidArgument("expert_x has hidden " + to_string(in.x.shape[2]) +
                          " (expert_x.shape[2]); the group was created with hidden " + to_string(s.hidden));
  if (!h->dispatched && g.ll)
    throw InvalidArgument("the handle has no dispatch yet: combine follows the handle's dispatch");
  const bool send_only = flags & ANYEP_SEND_ONLY;
  if (!g.ll) {
    const runtime::LLBufferInfo info = g.info(in.x.device);
    runtime::validate_combine_output(runtime::validate_combine(in, info), out, info);
    no_gpu("anyep_combine");
  }
  RecvPhase recv = g.ll->combine(in, out, send_only, stream);
  h->pending = std::move(recv);
  h->pending_what = h->pending ? "combine" : nullptr;
}

}  // namespace

Handle::~Handle() {
  if (!memory) return;
  const anyep_allocator_t& a = group->spec.allocator;
  if (a.free) {
    a.free(memory, memory_bytes, group->device, a.user);
  } else {
    try {
      device_free(memory, group->device);
    } catch (...) {
      // A destructor must not throw; the memory is lost with the error.
    }
  }
}

void alloc_handle_memory(Handle& h, size_t bytes, int device) {
  const anyep_allocator_t& a = h.group->spec.allocator;
  h.memory_bytes = bytes;
  if (a.alloc) {
    h.memory = a.alloc(bytes, device, a.user);
    if (!h.memory)
      throw InvalidArgument("cfg->allocator.alloc returned NULL for " + to_string(bytes) + " bytes of handle memory");
  } else {
    h.memory = device_alloc(bytes, device);
  }
}

std::shared_ptr<Handle> live_handle(anyep_handle_t handle, anyep_mode_t mode, const char* call) {
  require(handle, "handle");
  std::shared_ptr<Handle> h = handles().get(id_of(handle));
  h->group->expect_live();
  if (h->mode != mode)
    throw InvalidArgument(
        std::string(call) + " takes an " + (mode == ANYEP_MODE_LL ? "LL" : "HT") + " handle; this one is " +
        (h->mode == ANYEP_MODE_LL ? "an LL handle (anyep_handle_create)" : "an HT handle (anyep_ht_handle_create)"));
  return h;
}

Registry<Handle>& handles() {
  static Registry<Handle>* r = new Registry<Handle>("anyep handle");  // never destroyed: usable at exit
  return *r;
}

}  // namespace anyep::capi

using namespace anyep;
using namespace anyep::capi;

extern "C" anyepStatus anyep_handle_create(anyep_group_t group, anyep_mode_t mode, const anyep_tensor_t* topk_idx,
                                           anyep_handle_t* handle) {
  return guarded("anyep_handle_create", [&] {
    require(handle, "handle");
    *handle = nullptr;
    require(group, "group");
    *handle = as_opaque<anyep_handle>(handles().add(create(group, raw_enum(mode), topk_idx)));
  });
}

extern "C" anyepStatus anyep_handle_destroy(anyep_handle_t handle) {
  return guarded("anyep_handle_destroy", [&] {
    require(handle, "handle");
    std::shared_ptr<Handle> h = handles().take(id_of(handle));  // the last reference frees the memory
    // An HT handle destroyed between its counts exchange and its dispatch frees the group for
    // other HT calls (the peers' dispatch of it then times out).
    if (h->group->ht_awaiting_dispatch == id_of(handle)) h->group->ht_awaiting_dispatch = 0;
  });
}

extern "C" anyepStatus anyep_dispatch(anyep_handle_t handle, const anyep_tensor_t* x, const anyep_tensor_t* recv_x,
                                      const anyep_tensor_t* recv_scales, const anyep_tensor_t* recv_count,
                                      uint32_t flags, anyep_stream_t stream) {
  return guarded("anyep_dispatch", [&] { dispatch(handle, x, recv_x, recv_scales, recv_count, flags, stream); });
}

extern "C" anyepStatus anyep_combine(anyep_handle_t handle, const anyep_tensor_t* expert_x,
                                     const anyep_tensor_t* topk_weights, const anyep_tensor_t* out, uint32_t flags,
                                     anyep_stream_t stream) {
  return guarded("anyep_combine", [&] { combine(handle, expert_x, topk_weights, out, flags, stream); });
}

extern "C" anyepStatus anyep_complete(anyep_handle_t handle, anyep_stream_t stream) {
  return guarded("anyep_complete", [&] {
    std::shared_ptr<Handle> h = live_handle(handle, ANYEP_MODE_LL, "anyep_complete");
    if (!h->pending)
      throw InvalidArgument("nothing to complete: the handle has no send-only dispatch or combine pending");
    RecvPhase recv = std::move(h->pending);
    h->pending = nullptr;
    h->pending_what = nullptr;
    recv(stream);
  });
}
