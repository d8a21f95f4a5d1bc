// The C API's high-throughput side (DeepEP's normal mode; runtime/ht/buffer.h), behind the
// mode-generic handle calls (handle.cpp): an HT handle from topk_idx (layout, then the counts exchange, the host
// waiting for this rank's received count), its dispatch (once) and its combine. Every argument check of the runtime
// (runtime/ht/validate.h) runs in GPU-free groups too.
#include <string>

#include "anyep/anyep.h"
#include "capi/api_guard.h"
#include "capi/objects.h"
#include "common/error.h"
#include "runtime/common/check.h"
#include "runtime/ht/validate.h"  // ht:: limits and geometry, through the runtime contract

namespace anyep::capi {
namespace {

using runtime::DType;
using runtime::TensorRef;
using std::to_string;

constexpr size_t kAlign = 256;  // each table of the handle memory starts on its own block

[[noreturn]] void no_gpu(const char* call, const char* why) {
  throw Unsupported(std::string("no GPU: this group was created GPU-free (cfg->device = ANYEP_DEVICE_NONE); ") + call +
                    " " + why);
}

// What the runtime's checks know of the group's HT buffer. A GPU-free group has no device: the
// call's tensors take `device_of_call` as the group's, and no SM limit applies.
runtime::HTBufferInfo ht_info(const Group& g, int device_of_call) {
  if (g.ht) return g.ht->info();
  runtime::HTBufferInfo i;
  i.rank = g.spec.rank % g.ht_ranks;  // the HT buffer's ranks: the node's
  i.num_ranks = g.ht_ranks;
  i.device = device_of_call;
  i.num_bytes = g.spec.ht_bytes;
  return i;
}

// The HT protocol runs the calls of a group in one order on every rank: once a handle exchanged
// its counts, its dispatch comes next.
void expect_no_awaiting(const Group& g, uint64_t self, const char* call) {
  if (g.ht_awaiting_dispatch != 0 && g.ht_awaiting_dispatch != self)
    throw InvalidArgument(std::string(call) + " refused: HT handle " + to_string(g.ht_awaiting_dispatch) +
                          " exchanged its counts and has not dispatched; its dispatch must be the group's "
                          "next HT call on every rank");
}

// One table of the handle memory: a row-major tensor of `rows` x `cols` (cols 0: 1-D).
struct Piece {
  TensorRef* t;
  DType dtype;
  int64_t rows, cols;
};

// The tables in one allocation of handle memory, each on its own kAlign block (or, GPU-free,
// descriptors without memory: every check of a call runs all the same).
template <size_t N>
void place(Handle& h, const Piece (&pieces)[N], int device) {
  size_t offset[N], total = 0;
  for (size_t i = 0; i < N; ++i) {
    const Piece& p = pieces[i];
    offset[i] = total;
    const size_t cols = p.cols > 0 ? static_cast<size_t>(p.cols) : 1;
    total += (static_cast<size_t>(p.rows) * cols * runtime::dtype_bytes(p.dtype) + kAlign - 1) / kAlign * kAlign;
  }
  if (h.group->ht) alloc_handle_memory(h, total, device);
  static int64_t no_memory = 0;
  auto* base = h.memory ? static_cast<uint8_t*>(h.memory) : reinterpret_cast<uint8_t*>(&no_memory);
  for (size_t i = 0; i < N; ++i) {
    const Piece& p = pieces[i];
    *p.t = p.cols > 0 ? runtime::contiguous_ref(base + offset[i], p.dtype, {p.rows, p.cols}, device)
                      : runtime::contiguous_ref(base + offset[i], p.dtype, {p.rows}, device);
  }
}

// The handle's tables (intranode).
void lay_out_memory(Handle& h, HTState& st, const ht::Geometry& geo, int device) {
  const GroupSpec& s = h.group->spec;
  const int64_t R = s.num_ranks, E = s.num_experts, N = h.num_tokens, C = geo.channels, RT = R * s.max_tokens;
  const Piece pieces[] = {{&st.ntpr, DType::kInt32, R, 0},      {&st.ntpe, DType::kInt32, E, 0},
                          {&st.itir, DType::kBool, N, R},       {&st.rpm, DType::kInt32, R, R},
                          {&st.cpm, DType::kInt32, R, C},       {&st.rcpm, DType::kInt32, R, C},
                          {&st.send_head, DType::kInt32, N, R}, {&st.src_idx, DType::kInt32, RT, 0}};
  place(h, pieces, device);
}

// Internode: the pass's tables (runtime::HTInternodeTables). Rows: the most a rank forwards
// (nodes x T); k the node's ranks, C the node dispatch's channels.
void lay_out_internode(Handle& h, HTState& st, const ht::Geometry& geo, int device) {
  const Group& g = *h.group;
  const GroupSpec& s = g.spec;
  const int64_t k = g.ht_ranks, nodes = s.num_ranks / k, N = h.num_tokens, K = h.num_topk;
  const int64_t rows = nodes * s.max_tokens, L = s.num_experts / s.num_ranks, C = geo.channels;
  runtime::HTInternodeTables& t = st.net;
  const Piece pieces[] = {{&t.pos, DType::kInt32, nodes, N},       {&t.send_rows, DType::kInt64, nodes, 0},
                          {&t.recv_rows, DType::kInt64, nodes, 0}, {&t.topk_node, DType::kInt64, rows, K},
                          {&t.ntpr, DType::kInt32, k, 0},          {&t.ntpe, DType::kInt32, k * L, 0},
                          {&t.itir, DType::kBool, rows, k},        {&t.rpm, DType::kInt32, k, k},
                          {&t.cpm, DType::kInt32, k, C},           {&t.rcpm, DType::kInt32, k, C},
                          {&t.send_head, DType::kInt32, rows, k},  {&t.src_idx, DType::kInt32, k * rows, 0}};
  place(h, pieces, device);
}

// recv_src_idx of M rows: the first M of the handle's R * T.
TensorRef src_idx_of(const HTState& st, int64_t M) {
  TensorRef t = st.src_idx;
  t.shape[0] = M;
  t.storage_bytes = M * 4;
  return t;
}

// The dispatch's inputs: x and its scales and weights, with the handle's routing and layout.
runtime::HTDispatchIn dispatch_in(const Handle& h, const HTState& st, const TensorRef& x, const TensorRef& scales,
                                  const TensorRef& weights) {
  runtime::HTDispatchIn in;
  in.x = x;
  in.x_scales = scales;
  in.topk_idx = h.topk_idx;
  in.topk_weights = weights;
  in.num_tokens_per_rank = st.ntpr;
  in.is_token_in_rank = st.itir;
  in.num_tokens_per_expert = st.ntpe;
  in.expert_alignment = st.options.expert_alignment;
  in.config = st.options.dispatch;
  return in;
}

const HTState& counted(const Handle& h, const char* call) {
  if (!h.group->ht) no_gpu(call, "needs the counts the GPU exchanges at the handle's creation");
  return *h.ht;
}

}  // namespace

std::shared_ptr<Handle> ht_create(std::shared_ptr<Group> group, const anyep_tensor_t* topk_idx,
                                  const anyep_ht_options_t* opts, void* stream) {
  auto h = std::make_shared<Handle>();
  h->group = std::move(group);
  Group& g = *h->group;
  const GroupSpec& s = g.spec;
  g.expect_mode(ANYEP_MODE_HT);
  expect_no_awaiting(g, 0, "anyep_handle_create");
  h->mode = ANYEP_MODE_HT;
  h->ht = std::make_unique<HTState>();
  HTState& st = *h->ht;
  st.options = read_ht_options(opts, g.ht_ranks);  // the HT buffer's ranks: the node's
  h->topk_idx = tensor_ref(topk_idx, "topk_idx");
  const int dev = g.ht ? g.device : h->topk_idx.device;
  const runtime::HTBufferInfo info = ht_info(g, dev);
  // The routing's checks (the runtime's), over all ranks: across nodes the layout spans them.
  runtime::HTLayoutIn lin;
  lin.topk_idx = h->topk_idx;
  lin.num_experts = s.num_experts;
  runtime::HTBufferInfo all = info;
  all.rank = s.rank;
  all.num_ranks = s.num_ranks;
  const runtime::HTLayoutPlan lp = runtime::validate_ht_layout(lin, all);
  h->num_tokens = h->topk_idx.shape[0];
  h->num_topk = h->topk_idx.shape[1];
  check_routing_rows(*h);
  if (info.device_sms > 0 && st.options.dispatch.num_sms > info.device_sms)
    throw InvalidArgument("options->num_sms is " + to_string(st.options.dispatch.num_sms) + ", more than the " +
                          to_string(info.device_sms) +
                          " SMs of the group's device (sender and receiver blocks run at once)");

  // FP8 rows carry their scales: float32 per 128 elements, or packed UE8M0 int32 per 512.
  if (s.fp8()) {
    st.scale_dtype = s.ue8m0 ? DType::kInt32 : DType::kFloat32;
    st.scale_cols = static_cast<uint64_t>(s.ue8m0 ? s.hidden / 512 : s.hidden / 128);
  }
  const uint64_t x_bytes = static_cast<uint64_t>(s.hidden * runtime::dtype_bytes(s.dispatch_dtype));
  const int K = static_cast<int>(h->num_topk);
  const ht::Geometry geo =
      check_ht_fits(st.options.dispatch, "dispatch",
                    ht::dispatch_slot_bytes(x_bytes, static_cast<int>(st.scale_cols), K), g.ht_ranks, s.ht_bytes);
  check_ht_fits(st.options.combine, "combine", ht::combine_slot_bytes(s.hidden, K), g.ht_ranks, s.ht_bytes);
  if (g.internode()) {
    lay_out_internode(*h, st, geo, dev);
    if (!g.ht) return h;
    st.route = g.ht->route(h->topk_idx, st.net, st.options.dispatch, st.options.expert_alignment, stream);
    const int64_t most = static_cast<int64_t>(s.num_ranks) * s.max_tokens;
    if (st.route.num_recv < 0 || st.route.num_recv > most)
      throw InternalError("capi: the counts exchange reported " + to_string(st.route.num_recv) +
                          " rows to receive, outside [0, " + to_string(most) + "]");
    st.num_recv = st.route.num_recv;
    st.per_expert = st.route.per_expert;
    return h;
  }

  lay_out_memory(*h, st, geo, dev);

  // The counts exchange plans for the dispatch to come: x of the group's hidden and dtype, its
  // scales, the weights (stand-ins the notify pass never reads).
  void* stand_in = h->memory ? h->memory : static_cast<void*>(st.ntpr.data);
  const TensorRef x = runtime::contiguous_ref(stand_in, s.dispatch_dtype, {h->num_tokens, s.hidden}, dev);
  const TensorRef scales = s.fp8() ? runtime::contiguous_ref(stand_in, st.scale_dtype,
                                                             {h->num_tokens, static_cast<int64_t>(st.scale_cols)}, dev)
                                   : TensorRef();
  const TensorRef weights = runtime::contiguous_ref(stand_in, DType::kFloat32, {h->num_tokens, h->num_topk}, dev);
  const runtime::HTDispatchIn din = dispatch_in(*h, st, x, scales, weights);
  st.plan = runtime::validate_ht_dispatch(din, info);
  if (!g.ht) return h;  // GPU-free: every check passed; no counts without a GPU

  g.ht->layout(lin, lp, st.ntpr, st.ntpe, st.itir, stream);
  HTCounts c = g.ht->notify(din, st.plan, st.rpm, st.cpm, stream);
  const int64_t most = static_cast<int64_t>(s.num_ranks) * s.max_tokens;
  if (c.num_recv < 0 || c.num_recv > most)
    throw InternalError("capi: the counts exchange reported " + to_string(c.num_recv) +
                        " rows to receive, outside [0, " + to_string(most) + "]");
  st.num_recv = c.num_recv;
  st.per_expert = std::move(c.per_expert);
  return h;
}

namespace {

// Internode: the checks of a dispatch's inputs against the handle (the node's dispatch runs on
// rows the exchange delivers, planned at the handle's creation), and that plan (GPU-free: the
// output shapes alone, which is all the caller's outputs are checked against).
runtime::HTDispatchPlan internode_plan(const Handle& h, const HTState& st, const TensorRef& x, const TensorRef& scales,
                                       const TensorRef& weights, const runtime::HTBufferInfo& info) {
  const GroupSpec& s = h.group->spec;
  runtime::expect_tensor(x, "x", s.dispatch_dtype, 2, info.device);
  if (s.fp8()) {
    runtime::expect(scales.ndim == 2 && scales.shape[0] == h.num_tokens && scales.device == info.device, [&] {
      return "x_scales must be [" + to_string(h.num_tokens) + ", " + to_string(st.scale_cols) + "] on device " +
             to_string(info.device) + ", got " + runtime::shape_str(scales);
    });
  }
  runtime::expect(weights.present() && weights.dtype == DType::kFloat32 && weights.ndim == 2 &&
                      weights.shape[0] == h.num_tokens && weights.shape[1] == h.num_topk &&
                      weights.device == info.device,
                  [&] {
                    return "topk_weights must be float32 [" + to_string(h.num_tokens) + ", " + to_string(h.num_topk) +
                           "] on device " + to_string(info.device) + ", got " + runtime::shape_str(weights);
                  });
  if (h.group->ht) return st.route.node_plan;
  runtime::HTDispatchPlan p;
  p.hidden = s.hidden;
  p.x_dtype = s.dispatch_dtype;
  p.num_topk = h.num_topk;
  p.num_scales = static_cast<int64_t>(st.scale_cols);
  p.scales_dtype = st.scale_dtype;
  return p;
}

}  // namespace

void ht_dispatch(Handle& handle, uint64_t id, const anyep_dispatch_args_t& a) {
  Handle* h = &handle;
  const anyep_tensor_t *x_c = a.x, *scales_c = a.x_scales, *weights_c = a.topk_weights;
  const anyep_tensor_t *recv_x = a.recv_x, *recv_scales = a.recv_scales;
  const anyep_tensor_t *recv_topk_idx = a.recv_topk_idx, *recv_topk_weights = a.recv_topk_weights;
  void* stream = a.stream;
  Group& g = *h->group;
  const GroupSpec& s = g.spec;
  const HTState& st = *h->ht;
  if (h->dispatched)
    throw InvalidArgument(
        "the handle has dispatched already: an HT handle dispatches once (a new forward pass "
        "takes a new handle)");
  expect_no_awaiting(g, id, "anyep_dispatch");
  const TensorRef x = tensor_ref(x_c, "x");
  if (x.dtype != s.dispatch_dtype)
    throw InvalidArgument(std::string("x is ") + c_dtype_name(to_c_dtype(x.dtype)) +
                          "; the group's dispatch_dtype is " + c_dtype_name(to_c_dtype(s.dispatch_dtype)));
  if (x.ndim == 2 && x.shape[1] != s.hidden)
    throw InvalidArgument("x has hidden " + to_string(x.shape[1]) +
                          " (x.shape[1]); the group was created with hidden " + to_string(s.hidden));
  if (x.ndim == 2 && x.shape[0] != h->num_tokens)
    throw InvalidArgument("x has " + to_string(x.shape[0]) + " rows, the handle's topk_idx " +
                          to_string(h->num_tokens));
  TensorRef scales;
  if (s.fp8()) {
    scales = tensor_ref(scales_c, "x_scales");
    if (scales.dtype != st.scale_dtype)
      throw InvalidArgument(std::string("x_scales must be ") + c_dtype_name(to_c_dtype(st.scale_dtype)) + ", got " +
                            c_dtype_name(to_c_dtype(scales.dtype)) + (s.ue8m0 ? " (UE8M0 group)" : ""));
    if (scales.ndim == 2 && scales.shape[1] != static_cast<int64_t>(st.scale_cols))
      throw InvalidArgument("x_scales has " + to_string(scales.shape[1]) + " columns, the group's hidden " +
                            to_string(s.hidden) + " takes " + to_string(st.scale_cols));
  } else if (scales_c) {
    throw InvalidArgument("x_scales must be NULL: the group's dispatch_dtype is ANYEP_BFLOAT16 (no scales)");
  }
  const TensorRef weights = tensor_ref(weights_c, "topk_weights");
  const runtime::HTBufferInfo info = ht_info(g, x.device);
  const runtime::HTDispatchPlan p = g.internode()
                                        ? internode_plan(*h, st, x, scales, weights, info)
                                        : runtime::validate_ht_dispatch(dispatch_in(*h, st, x, scales, weights), info);

  // M: the exchanged count, or (GPU-free) the rows of recv_x, at most what a rank can receive.
  HTOutputs o;
  o.recv_x = tensor_ref(recv_x, "recv_x");
  const int64_t most = static_cast<int64_t>(s.num_ranks) * s.max_tokens;
  int64_t M = st.num_recv;
  if (!g.ht) {
    M = o.recv_x.ndim >= 1 ? o.recv_x.shape[0] : 0;
    if (M > most)
      throw InvalidArgument("recv_x has " + to_string(M) + " rows, more than a rank can receive (num_ranks x " +
                            "max_tokens_per_rank = " + to_string(most) + ")");
  }
  const runtime::HTDispatchOutSpecs specs = runtime::ht_dispatch_outputs(p, M, info);
  runtime::expect_output(o.recv_x, specs.recv_x, "recv_x", info.device);
  if (s.fp8()) {
    o.recv_x_scales = tensor_ref(recv_scales, "recv_scales");
    runtime::expect_output(o.recv_x_scales, specs.recv_x_scales, "recv_scales", info.device);
  } else if (recv_scales) {
    throw InvalidArgument("recv_scales must be NULL: the group's dispatch_dtype is ANYEP_BFLOAT16 (no scales)");
  }
  o.recv_topk_idx = tensor_ref(recv_topk_idx, "recv_topk_idx");
  runtime::expect_output(o.recv_topk_idx, specs.recv_topk_idx, "recv_topk_idx", info.device);
  o.recv_topk_weights = tensor_ref(recv_topk_weights, "recv_topk_weights");
  runtime::expect_output(o.recv_topk_weights, specs.recv_topk_weights, "recv_topk_weights", info.device);
  if (!g.ht) no_gpu("anyep_dispatch", "needs a GPU (every argument check passed)");
  if (g.internode()) {
    o.recv_channel_prefix_matrix = st.net.rcpm;
    o.recv_src_idx = st.net.src_idx;
    o.recv_src_idx.shape[0] = M;
    o.send_head = st.net.send_head;
    o.send_head.shape[0] = st.route.forward_rows;
    g.ht->internode_dispatch(st.route, st.net, x, scales, weights, st.options.dispatch, st.options.expert_alignment, o,
                             stream);
  } else {
    o.recv_channel_prefix_matrix = st.rcpm;
    o.recv_src_idx = src_idx_of(st, M);
    o.send_head = st.send_head;
    g.ht->dispatch(dispatch_in(*h, st, x, scales, weights), p, M, st.rpm, st.cpm, o, stream);
  }
  h->dispatched = true;
  g.ht_awaiting_dispatch = 0;
}

namespace {

// Internode combine: the checks here and the node's (on the GPU), then the runtime's.
void combine_internode(const Handle& h, const HTState& st, const TensorRef& x, const TensorRef& weights, int64_t M,
                       const anyep_tensor_t* out_c, const anyep_tensor_t* out_weights_c, void* stream) {
  const Group& g = *h.group;
  const int dev = g.ht ? g.device : x.device;
  runtime::expect_tensor(x, "x", DType::kBFloat16, 2, dev);
  runtime::expect(x.shape[0] == M, [&] {
    return "x has " + to_string(x.shape[0]) + " rows; the handle's dispatch received " + to_string(M) +
           " (combine takes the dispatch's recv_x layout)";
  });
  if (weights.present()) {
    runtime::expect_tensor(weights, "topk_weights", DType::kFloat32, 2, dev);
    runtime::expect(weights.shape[0] == M && weights.shape[1] == h.num_topk, [&] {
      return "topk_weights must be [" + to_string(M) + ", " + to_string(h.num_topk) + "], got " +
             runtime::shape_str(weights);
    });
  }
  const TensorRef out = tensor_ref(out_c, "out");
  runtime::expect_output(out, runtime::contiguous_spec(DType::kBFloat16, {h.num_tokens, g.spec.hidden}), "out", dev);
  TensorRef out_w;
  if (weights.present()) {
    out_w = tensor_ref(out_weights_c, "out_topk_weights");
    runtime::expect_output(out_w, runtime::contiguous_spec(DType::kFloat32, {h.num_tokens, h.num_topk}),
                           "out_topk_weights", dev);
  } else if (out_weights_c) {
    throw InvalidArgument("out_topk_weights must be NULL when topk_weights is NULL");
  }
  if (!g.ht) no_gpu("anyep_combine", "needs a GPU (every argument check passed)");
  g.ht->internode_combine(st.route, st.net, x, weights, st.options.combine, out, out_w, stream);
}

}  // namespace

void ht_combine(Handle& handle, const anyep_combine_args_t& a) {
  Handle* h = &handle;
  const anyep_tensor_t *x_c = a.x, *weights_c = a.topk_weights, *out_c = a.out, *out_weights_c = a.out_topk_weights;
  void* stream = a.stream;
  Group& g = *h->group;
  const GroupSpec& s = g.spec;
  const HTState& st = *h->ht;
  if (!h->dispatched && g.ht)
    throw InvalidArgument("the handle has no dispatch yet: combine follows the handle's dispatch");
  expect_no_awaiting(g, 0, "anyep_combine");
  runtime::HTCombineIn in;
  in.x = tensor_ref(x_c, "x");
  if (in.x.ndim == 2 && in.x.shape[1] != s.hidden)
    throw InvalidArgument("x has hidden " + to_string(in.x.shape[1]) +
                          " (x.shape[1]); the group was created with hidden " + to_string(s.hidden));
  in.topk_weights = tensor_ref(weights_c, "topk_weights", false);
  const int64_t M = g.ht ? st.num_recv : (in.x.ndim >= 1 ? in.x.shape[0] : 0);
  const int64_t most = static_cast<int64_t>(s.num_ranks) * s.max_tokens;
  if (M > most)
    throw InvalidArgument("x has " + to_string(M) + " rows, more than a rank can receive (num_ranks x " +
                          "max_tokens_per_rank = " + to_string(most) + ")");
  if (g.internode()) return combine_internode(*h, st, in.x, in.topk_weights, M, out_c, out_weights_c, stream);
  in.src_idx = src_idx_of(st, M);
  in.rank_prefix_matrix = st.rpm;
  in.recv_channel_prefix_matrix = st.rcpm;
  in.send_head = st.send_head;
  in.config = st.options.combine;
  const runtime::HTBufferInfo info = ht_info(g, in.x.device);
  const runtime::HTCombinePlan p = runtime::validate_ht_combine(in, info);
  const TensorRef out = tensor_ref(out_c, "out");
  runtime::expect_output(out, p.out, "out", info.device);
  TensorRef out_w;
  if (p.out_weights.present) {
    out_w = tensor_ref(out_weights_c, "out_topk_weights");
    runtime::expect_output(out_w, p.out_weights, "out_topk_weights", info.device);
  } else if (out_weights_c) {
    throw InvalidArgument("out_topk_weights must be NULL when topk_weights is NULL");
  }
  if (!g.ht) no_gpu("anyep_combine", "needs a GPU (every argument check passed)");
  g.ht->combine(in, p, out, out_w, stream);
}

}  // namespace anyep::capi

using namespace anyep;
using namespace anyep::capi;

extern "C" anyep_status_t anyep_ht_get_recv_counts(anyep_handle_t handle, int64_t* num_recv, int32_t* per_expert,
                                                   int64_t per_expert_len) {
  return guarded("anyep_ht_get_recv_counts", [&] {
    std::shared_ptr<Handle> h = live_handle(handle, ANYEP_MODE_HT, "anyep_ht_get_recv_counts");
    require(num_recv, "num_recv");
    const int64_t L = h->group->spec.num_experts / h->group->spec.num_ranks;
    if (per_expert && per_expert_len < L)
      throw InvalidArgument("per_expert_len is " + std::to_string(per_expert_len) + ", less than the " +
                            std::to_string(L) + " local experts (num_experts / num_ranks)");
    const HTState& st = counted(*h, "anyep_ht_get_recv_counts");
    *num_recv = st.num_recv;
    if (per_expert)
      for (int64_t l = 0; l < L; ++l)
        per_expert[l] = static_cast<size_t>(l) < st.per_expert.size() ? st.per_expert[l] : 0;
  });
}

extern "C" anyep_status_t anyep_ht_get_dispatch_outputs(anyep_handle_t handle, anyep_tensor_t* recv_x,
                                                        anyep_tensor_t* recv_scales, anyep_tensor_t* recv_topk_idx,
                                                        anyep_tensor_t* recv_topk_weights) {
  return guarded("anyep_ht_get_dispatch_outputs", [&] {
    std::shared_ptr<Handle> h = live_handle(handle, ANYEP_MODE_HT, "anyep_ht_get_dispatch_outputs");
    const HTState& st = counted(*h, "anyep_ht_get_dispatch_outputs");
    const Group& g = *h->group;
    const runtime::HTDispatchOutSpecs o =
        runtime::ht_dispatch_outputs(g.internode() ? st.route.node_plan : st.plan, st.num_recv, g.ht->info());
    if (recv_x) *recv_x = to_c_tensor(o.recv_x, g.device);
    if (recv_scales) *recv_scales = to_c_tensor(o.recv_x_scales, g.device);
    if (recv_topk_idx) *recv_topk_idx = to_c_tensor(o.recv_topk_idx, g.device);
    if (recv_topk_weights) *recv_topk_weights = to_c_tensor(o.recv_topk_weights, g.device);
  });
}

// The deprecated HT-only names (anyep.h): wrappers of the mode-generic calls.

extern "C" anyep_status_t anyep_ht_handle_create(anyep_group_t group, const anyep_tensor_t* topk_idx,
                                                 const anyep_ht_options_t* options, anyep_stream_t stream,
                                                 anyep_handle_t* handle) {
  return anyep_handle_create(group, ANYEP_MODE_HT, topk_idx, options, stream, handle);
}

extern "C" anyep_status_t anyep_ht_dispatch(anyep_handle_t handle, const anyep_tensor_t* x,
                                            const anyep_tensor_t* x_scales, const anyep_tensor_t* topk_weights,
                                            const anyep_tensor_t* recv_x, const anyep_tensor_t* recv_scales,
                                            const anyep_tensor_t* recv_topk_idx,
                                            const anyep_tensor_t* recv_topk_weights, anyep_stream_t stream) {
  anyep_dispatch_args_t a;
  anyep_dispatch_args_init(&a, ANYEP_MODE_HT);
  a.x = x;
  a.x_scales = x_scales;
  a.topk_weights = topk_weights;
  a.recv_x = recv_x;
  a.recv_scales = recv_scales;
  a.recv_topk_idx = recv_topk_idx;
  a.recv_topk_weights = recv_topk_weights;
  a.stream = stream;
  return anyep_dispatch(handle, &a);
}

extern "C" anyep_status_t anyep_ht_combine(anyep_handle_t handle, const anyep_tensor_t* x,
                                           const anyep_tensor_t* topk_weights, const anyep_tensor_t* out,
                                           const anyep_tensor_t* out_topk_weights, anyep_stream_t stream) {
  anyep_combine_args_t a;
  anyep_combine_args_init(&a, ANYEP_MODE_HT);
  a.x = x;
  a.topk_weights = topk_weights;
  a.out = out;
  a.out_topk_weights = out_topk_weights;
  a.stream = stream;
  return anyep_combine(handle, &a);
}
