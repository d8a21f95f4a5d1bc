// The C API's per-forward-pass handle, mode-generic: anyep_handle_create, anyep_dispatch and
// anyep_combine convert the caller's arguments and route by the handle's mode to the LL calls
// (here) or the HT calls (ht_handle.cpp). The checks of the arguments are the runtime's
// (runtime/ll/validate.h, runtime/ht/validate.h); what stays here is what only the C boundary
// knows: NULL pointers, struct sizes, the mode, and the group's configuration. anyep_complete
// launches the receive phase of an LL send-only call.
#include <string>

#include "anyep/anyep.h"
#include "capi/api_guard.h"
#include "capi/objects.h"
#include "common/error.h"
#include "runtime/common/check.h"
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

}  // namespace

void check_routing_rows(const Handle& h) {
  const int64_t most = h.group->spec.max_tokens;
  if (h.num_tokens > most)
    throw InvalidArgument("topk_idx has " + to_string(h.num_tokens) +
                          " tokens, more than the group's max_tokens_per_rank=" + to_string(most));
}

std::shared_ptr<Handle> ll_create(std::shared_ptr<Group> group, const anyep_tensor_t* topk_idx) {
  auto h = std::make_shared<Handle>();
  h->group = std::move(group);
  const Group& g = *h->group;
  const GroupSpec& s = g.spec;
  g.expect_mode(ANYEP_MODE_LL);
  h->mode = ANYEP_MODE_LL;
  h->topk_idx = tensor_ref(topk_idx, "topk_idx");
  const runtime::TensorRef& t = h->topk_idx;
  // The runtime's check of the routing, at creation: dispatch checks it again with x.
  runtime::expect_tensor(t, "topk_idx", runtime::DType::kInt64, 2, g.ll ? g.device : t.device);
  h->num_tokens = t.shape[0];
  h->num_topk = t.shape[1];
  check_routing_rows(*h);
  if (h->num_topk < 1 || h->num_topk > ll::kMaxTopk)
    throw InvalidArgument("topk_idx has " + to_string(h->num_topk) + " experts per token, outside [1, " +
                          to_string(ll::kMaxTopk) + "]");

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

void ll_dispatch(Handle& h, const anyep_dispatch_args_t& a) {
  Group& g = *h.group;
  const GroupSpec& s = g.spec;
  check_flags(a.flags);
  expect_nothing_staged(h);
  runtime::LLDispatchIn in;
  in.x = tensor_ref(a.x, "x");
  if (in.x.ndim == 2 && in.x.shape[1] != s.hidden)
    throw InvalidArgument("x has hidden " + to_string(in.x.shape[1]) +
                          " (x.shape[1]); the group was created with hidden " + to_string(s.hidden));
  in.topk_idx = h.topk_idx;
  in.max_tokens = s.max_tokens;
  in.num_experts = s.num_experts;
  in.use_fp8 = s.fp8();
  in.round_scale = s.round_scale;
  in.use_ue8m0 = s.ue8m0;
  runtime::LLDispatchOut out;
  out.recv_x = tensor_ref(a.recv_x, "recv_x");
  if (s.fp8()) {
    out.recv_scales = tensor_ref(a.recv_scales, "recv_scales");
  } else if (a.recv_scales) {
    throw InvalidArgument("recv_scales must be NULL: the group's dispatch_dtype is ANYEP_BFLOAT16 (no scales)");
  }
  out.recv_count = tensor_ref(a.recv_count, "recv_count");
  out.src_info = h.src_info;
  out.layout_range = h.layout_range;
  const bool send_only = a.flags & ANYEP_SEND_ONLY;
  if (!g.ll) {
    const runtime::LLBufferInfo info = g.info(in.x.device);
    runtime::validate_dispatch_outputs(runtime::validate_dispatch(in, info), out, info);
    no_gpu("anyep_dispatch");
  }
  RecvPhase recv = g.ll->dispatch(in, out, send_only, a.stream);
  h.dispatched = true;
  h.pending = std::move(recv);
  h.pending_what = h.pending ? "dispatch" : nullptr;
}

void ll_combine(Handle& h, const anyep_combine_args_t& a) {
  Group& g = *h.group;
  const GroupSpec& s = g.spec;
  check_flags(a.flags);
  expect_nothing_staged(h);
  runtime::LLCombineIn in;
  in.x = tensor_ref(a.x, "x");
  in.topk_idx = h.topk_idx;
  in.topk_weights = tensor_ref(a.topk_weights, "topk_weights");
  in.src_info = h.src_info;
  in.layout_range = h.layout_range;
  in.max_tokens = s.max_tokens;
  in.num_experts = s.num_experts;
  const runtime::TensorRef out = tensor_ref(a.out, "out");
  if (in.x.ndim == 3 && in.x.shape[2] != s.hidden)
    throw InvalidArgument("x has hidden " + to_string(in.x.shape[2]) +
                          " (x.shape[2]); the group was created with hidden " + to_string(s.hidden));
  if (!h.dispatched && g.ll)
    throw InvalidArgument("the handle has no dispatch yet: combine follows the handle's dispatch");
  const bool send_only = a.flags & ANYEP_SEND_ONLY;
  if (!g.ll) {
    const runtime::LLBufferInfo info = g.info(in.x.device);
    runtime::validate_combine_output(runtime::validate_combine(in, info), out, info);
    no_gpu("anyep_combine");
  }
  RecvPhase recv = g.ll->combine(in, out, send_only, a.stream);
  h.pending = std::move(recv);
  h.pending_what = h.pending ? "combine" : nullptr;
}

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

std::shared_ptr<Handle> live_handle(anyep_handle_t handle) {
  require(handle, "handle");
  std::shared_ptr<Handle> h = handles().get(id_of(handle));
  h->group->expect_live();
  return h;
}

std::shared_ptr<Handle> live_handle(anyep_handle_t handle, anyep_mode_t mode, const char* call) {
  std::shared_ptr<Handle> h = live_handle(handle);
  if (h->mode != mode)
    throw InvalidArgument(std::string(call) + " takes an " + (mode == ANYEP_MODE_LL ? "LL" : "HT") +
                          " handle; this one was created with " + mode_name(h->mode));
  return h;
}

Registry<Handle>& handles() {
  static Registry<Handle>* r = new Registry<Handle>("anyep handle");  // never destroyed: usable at exit
  return *r;
}

namespace {

const char* mode_word(anyep_mode_t m) { return m == ANYEP_MODE_LL ? "an LL" : "an HT"; }

// The args' mode must be the handle's; `init` names the function that fills them for it.
void expect_args_mode(const Handle& h, const anyep_mode_t& args_mode, const char* init) {
  const int32_t m = raw_enum(args_mode);
  if (m == h.mode) return;
  throw InvalidArgument(std::string("args->mode is ") + mode_name(m) + ", but the handle is " + mode_word(h.mode) +
                        " handle (created with " + mode_name(h.mode) + "): fill the args for its mode with " + init +
                        "(&args, " + mode_name(h.mode) + ")");
}

// A field of the other mode's args must stay NULL.
void expect_unset(const void* p, const char* field, const Handle& h) {
  if (p)
    throw InvalidArgument(std::string("args->") + field + " is set, but " + mode_word(h.mode) +
                          " handle does not take it: leave it NULL");
}

void expect_no_flags(uint32_t flags) {
  if (flags != 0)
    throw InvalidArgument("args->flags is " + to_string(flags) +
                          ": an HT handle takes no flags (ANYEP_SEND_ONLY is LL's)");
}

}  // namespace
}  // namespace anyep::capi

using namespace anyep;
using namespace anyep::capi;

extern "C" anyep_status_t anyep_handle_create(anyep_group_t group, anyep_mode_t mode, const anyep_tensor_t* topk_idx,
                                              const anyep_ht_options_t* ht_options, anyep_stream_t stream,
                                              anyep_handle_t* handle) {
  return guarded("anyep_handle_create", [&] {
    require(handle, "handle");
    *handle = nullptr;
    require(group, "group");
    std::shared_ptr<Group> g = groups().get(id_of(group));
    std::shared_ptr<Handle> h;
    switch (raw_enum(mode)) {
      case ANYEP_MODE_LL:
        if (ht_options) throw InvalidArgument("ht_options must be NULL for an ANYEP_MODE_LL handle (HT tuning)");
        h = ll_create(g, topk_idx);
        break;
      case ANYEP_MODE_HT:
        h = ht_create(g, topk_idx, ht_options, stream);
        break;
      case ANYEP_MODE_BOTH:
        throw InvalidArgument(
            "mode is ANYEP_MODE_BOTH: a handle has one mode (ANYEP_MODE_LL or ANYEP_MODE_HT); a group of "
            "ANYEP_MODE_BOTH makes handles of either");
      default:
        throw InvalidArgument("mode is " + to_string(raw_enum(mode)) + ", not ANYEP_MODE_LL (1) or ANYEP_MODE_HT (2)");
    }
    // An HT handle whose counts were exchanged: its dispatch is the group's next HT call.
    const bool counted = h->ht && h->ht->num_recv >= 0;
    const uint64_t id = handles().add(h);
    if (counted) g->ht_awaiting_dispatch = id;
    *handle = as_opaque<anyep_handle>(id);
  });
}

extern "C" anyep_status_t anyep_handle_destroy(anyep_handle_t handle) {
  return guarded("anyep_handle_destroy", [&] {
    require(handle, "handle");
    std::shared_ptr<Handle> h = handles().take(id_of(handle));  // the last reference frees the memory
    // An HT handle destroyed between its counts exchange and its dispatch frees the group for
    // other HT calls (the peers' dispatch of it then times out).
    if (h->group->ht_awaiting_dispatch == id_of(handle)) h->group->ht_awaiting_dispatch = 0;
  });
}

extern "C" anyep_status_t anyep_handle_get_mode(anyep_handle_t handle, anyep_mode_t* mode) {
  return guarded("anyep_handle_get_mode", [&] {
    require(mode, "mode");
    *mode = live_handle(handle)->mode;
  });
}

extern "C" anyep_status_t anyep_dispatch(anyep_handle_t handle, const anyep_dispatch_args_t* args) {
  return guarded("anyep_dispatch", [&] {
    std::shared_ptr<Handle> h = live_handle(handle);
    require(args, "args");
    const auto a = read_versioned(args, "anyep_dispatch_args_t", "anyep_dispatch_args_init");
    expect_args_mode(*h, a.mode, "anyep_dispatch_args_init");
    if (h->mode == ANYEP_MODE_LL) {
      expect_unset(a.x_scales, "x_scales", *h);
      expect_unset(a.topk_weights, "topk_weights", *h);
      expect_unset(a.recv_topk_idx, "recv_topk_idx", *h);
      expect_unset(a.recv_topk_weights, "recv_topk_weights", *h);
      ll_dispatch(*h, a);
    } else {
      expect_unset(a.recv_count, "recv_count", *h);
      expect_no_flags(a.flags);
      ht_dispatch(*h, id_of(handle), a);
    }
  });
}

extern "C" anyep_status_t anyep_combine(anyep_handle_t handle, const anyep_combine_args_t* args) {
  return guarded("anyep_combine", [&] {
    std::shared_ptr<Handle> h = live_handle(handle);
    require(args, "args");
    const auto a = read_versioned(args, "anyep_combine_args_t", "anyep_combine_args_init");
    expect_args_mode(*h, a.mode, "anyep_combine_args_init");
    if (h->mode == ANYEP_MODE_LL) {
      expect_unset(a.out_topk_weights, "out_topk_weights", *h);
      ll_combine(*h, a);
    } else {
      expect_no_flags(a.flags);
      ht_combine(*h, a);
    }
  });
}

extern "C" anyep_status_t anyep_complete(anyep_handle_t handle, anyep_stream_t stream) {
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
