#include "runtime/ht/internode.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "common/cuda_check.h"
#include "common/env.h"
#include "common/error.h"
#include "kernels/ht/internode_protocol.h"
#include "runtime/common/check.h"

namespace anyep::runtime {
namespace {

using std::to_string;

constexpr const char* kWho = "anyep HT internode";  // what cuda_check's messages start with

constexpr int kCounts = ht::internode::kMaxNodes;  // counts_[0, kCounts): sent, [kCounts, 2 kCounts): received

// The first `rows` rows of a row-major table (its storage unchanged).
TensorRef first_rows(TensorRef t, int64_t rows) {
  t.shape[0] = rows;
  return t;
}

TensorRef view(void* data, DType d, int64_t rows, int64_t cols, int device) {
  return contiguous_ref(data, d, {rows, cols}, device);
}

// A segment of a 2-D tensor's rows (any strides; rows of 1- or 2-byte elements and of int64 ids
// must be contiguous), at byte `offset` of the exchange row.
ht::RowSegment segment(const TensorRef& t, uint64_t offset) {
  const int64_t eb = dtype_bytes(t.dtype);
  ht::RowSegment s;
  s.base = static_cast<uint8_t*>(t.data);
  s.row_stride = t.strides[0] * eb;
  s.word_stride = eb == 4 ? t.strides[1] * 4 : 4;
  s.words = static_cast<int32_t>(t.shape[1] * eb / 4);
  s.offset = static_cast<int32_t>(offset);
  return s;
}

template <typename T>
T* ptr(const TensorRef& t) {
  return t.present() ? static_cast<T*>(t.data) : nullptr;
}

}  // namespace

HTInternode::HTInternode(int rank, int num_ranks, int ranks_per_node, int64_t nvl_bytes, int64_t rdma_bytes, int device)
    : rank_(rank), num_ranks_(num_ranks), k_(ranks_per_node), device_(device) {
  if (ranks_per_node < 1 || num_ranks % ranks_per_node != 0)
    throw InvalidArgument("anyep HT internode: " + to_string(num_ranks) + " ranks are not whole nodes of " +
                          to_string(ranks_per_node));
  net_ = std::make_unique<HTNet>(rank, num_ranks, ranks_per_node, rdma_bytes, device);
  device_ = net_->device();
  node_ = std::make_unique<HTBuffer>(rank % ranks_per_node, ranks_per_node, nvl_bytes, device_);
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  counts_ = DeviceRegion(sizeof(int64_t) * 2 * kCounts, "anyep HT internode exchange counts");
  host_ = MappedHostRegion(sizeof(int64_t) * 2 * kCounts, "anyep HT internode host counts");
  cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), kWho, "cudaEventCreate");
  timeout_ns_ = env::get_duration_ns("ANYEP_TIMEOUT_S");
}

HTInternode::~HTInternode() {
  try {
    destroy();
  } catch (...) {
    // Destructors must not throw; destroy() called explicitly reports errors.
  }
}

void HTInternode::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();  // no kernel of this rank still uses the memory below
  if (node_) node_->destroy();
  if (net_) net_->destroy();
  rows_.reset();
  stage_.reset();
  counts_.reset();
  host_.reset();
  if (event_) cudaEventDestroy(event_);
  event_ = nullptr;
}

void HTInternode::connect(const std::vector<std::vector<uint8_t>>& infos, transport::Bootstrap& boot) {
  if (infos.size() != static_cast<size_t>(num_ranks_))
    throw InvalidArgument("anyep HT internode connect: " + to_string(infos.size()) + " records for " +
                          to_string(num_ranks_) + " ranks");
  const int node = rank_ / k_;
  node_->connect(std::vector<std::vector<uint8_t>>(infos.begin() + node * k_, infos.begin() + (node + 1) * k_));
  net_->connect(boot);
}

std::string HTInternode::describe_paths() const {
  return "internode: " + net_->describe_paths() + "; inside node " + to_string(rank_ / k_) + ": " +
         node_->describe_paths();
}

void HTInternode::check_error() const {
  net_->check_error();
  node_->check_error();
}

void HTInternode::ready() const {
  if (destroyed_) throw InvalidArgument("anyep HT internode: the buffer was destroyed");
  check_error();
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
}

void HTInternode::reserve(int64_t forward_rows, const HTInternodeRows& r) {
  ready();
  const uint64_t K = ht::kMaxTopk;
  const uint64_t rows_need = uint64_t(forward_rows) *
                             std::max({ht_route_row_bytes(K), ht_dispatch_row_bytes(r, K), ht_combine_row_bytes(r, K)});
  if (rows_need > rows_.size()) {
    rows_.reset();  // the old rows go first: the two need not fit at once
    rows_ = DeviceRegion(rows_need, "anyep HT internode exchange rows", false);
  }
  // The stage's x area holds a dispatch's x or a combine's BF16 rows; 16-byte aligned areas.
  const uint64_t x_need = (std::max(uint64_t(r.hidden) * dtype_bytes(r.x_dtype), 2 * uint64_t(r.hidden)) + 15) & ~15ull;
  const uint64_t s_need = (4 * uint64_t(r.scale_cols) + 15) & ~15ull;
  if (forward_rows > stage_rows_ || x_need > stage_x_ || s_need > stage_s_) {
    const int64_t rows = std::max(forward_rows, stage_rows_);
    const uint64_t xb = std::max(x_need, stage_x_), sb = std::max(s_need, stage_s_);
    stage_.reset();
    stage_ = DeviceRegion(std::max<uint64_t>(uint64_t(rows) * (xb + sb + 4 * K), 16), "anyep HT internode stage rows",
                          false);
    stage_rows_ = rows;
    stage_x_ = xb;
    stage_s_ = sb;
  }
}

uint8_t* HTInternode::stage_scales() const { return stage_.data() + uint64_t(stage_rows_) * stage_x_; }
uint8_t* HTInternode::stage_weights() const { return stage_.data() + uint64_t(stage_rows_) * (stage_x_ + stage_s_); }

std::vector<int64_t> HTInternode::to_host(const int64_t* src, int n, cudaStream_t stream, const char* what) {
  cuda_check(cudaMemcpyAsync(host_.host(), src, sizeof(int64_t) * n, cudaMemcpyDeviceToHost, stream), kWho, what);
  cuda_check(cudaEventRecord(event_, stream), kWho, what);
  // Every kernel wait ends within ANYEP_TIMEOUT_S; the margin covers the stages queued before.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(2 * timeout_ns_) + std::chrono::seconds(10);
  for (;;) {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) cuda_check(e, kWho, what);
    if (std::chrono::steady_clock::now() > deadline) {
      check_error();  // a peer's timeout found on the device names it
      throw TimeoutError("anyep HT internode: rank " + to_string(rank_) + ": " + what +
                         " did not complete within twice ANYEP_TIMEOUT_S (+10 s)");
    }
    std::this_thread::yield();
  }
  check_error();
  const int64_t* h = host_.host_as<int64_t>();
  return std::vector<int64_t>(h, h + n);
}

void HTInternode::send_exchange(const int64_t* send_rows, const int64_t* expect_rows, ht::PackArgs pack,
                                uint64_t row_bytes, cudaStream_t stream) {
  const ht::internode::Exchange ex = net_->exchange();
  net_->begin(stream);
  pack.nodes = nodes();
  pack.row_bytes = row_bytes;
  pack.send_area = net_->region() + ex.send_off(0) + ht::internode::kBlockHeaderBytes;
  pack.block_bytes = ex.block_bytes();
  pack.capacity = ex.row_capacity(row_bytes);
  cuda_check(ht::launch_pack(pack, stream), kWho, "pack launch");
  net_->send(send_rows, expect_rows, counts_.as<int64_t>() + kCounts, row_bytes, stream);
}

void HTInternode::finish_exchange(uint64_t row_bytes, cudaStream_t stream) {
  net_->finish(counts_.as<int64_t>() + kCounts, rows_.data(), row_bytes, stream);
}

void HTInternode::unpack(const ht::RowSegment* seg, int n, int64_t rows, uint64_t row_bytes, cudaStream_t stream) {
  ht::UnpackArgs un;
  for (int i = 0; i < n; ++i) un.seg[i] = seg[i];
  un.num_segments = n;
  un.num_rows = static_cast<int>(rows);
  un.rows = rows_.data();
  un.row_bytes = row_bytes;
  cuda_check(ht::launch_unpack(un, stream), kWho, "unpack launch");
}

HTInternodeCounts HTInternode::route_send(const TensorRef& topk_idx, int64_t num_experts, const HTInternodeRows& rows,
                                          const HTInternodeTables& t, cudaStream_t stream) {
  ready();
  // Every check of the layout over all ranks (dtype, shape, device, num_experts).
  HTLayoutIn lin;
  lin.topk_idx = topk_idx;
  lin.num_experts = num_experts;
  const HTBufferInfo all{rank_, num_ranks_, device_, 0, node_->info().device_sms};
  const HTLayoutPlan lp = validate_ht_layout(lin, all);
  HTInternodeCounts c;
  c.num_tokens = lp.num_tokens;
  c.num_topk = lp.num_topk;
  c.num_experts = num_experts;
  c.rows = rows;
  const int64_t N = c.num_tokens, K = c.num_topk, L = num_experts / num_ranks_;
  if (rows.hidden <= 0 || (rows.hidden * dtype_bytes(rows.x_dtype)) % 16 != 0)
    throw InvalidArgument("anyep HT internode: hidden=" + to_string(rows.hidden) +
                          " must make rows of a multiple of 16 bytes");
  expect_tensor(t.pos, "pos", DType::kInt32, 2, device_);
  expect(t.pos.shape[0] == nodes() && t.pos.shape[1] == N,
         [&] { return "the pass's pos table must be [" + to_string(nodes()) + ", " + to_string(N) + "]"; });
  const std::pair<const TensorRef*, const char*> row_counts[] = {{&t.send_rows, "send_rows"},
                                                                 {&t.recv_rows, "recv_rows"}};
  for (const auto& rc : row_counts) {
    const char* name = rc.second;
    expect_tensor(*rc.first, name, DType::kInt64, 1, device_);
    expect(rc.first->shape[0] == nodes(),
           [&] { return std::string("the pass's ") + name + " table must be [" + to_string(nodes()) + "]"; });
  }

  ht::RouteArgs ra;
  ra.topk_idx = ptr<const int64_t>(topk_idx);
  ra.num_tokens = static_cast<int>(N);
  ra.num_topk = static_cast<int>(K);
  ra.nodes = nodes();
  ra.num_experts = num_experts;
  ra.experts_per_node = L * k_;
  ra.pos = ptr<int32_t>(t.pos);
  ra.send_rows = ptr<int64_t>(t.send_rows);
  ra.err = net_->error_record();
  ra.rank = rank_;
  cuda_check(ht::launch_route(ra, stream), kWho, "route launch");

  // The top-k ids cross the rail exchange; the host learns the rows sent and received per node.
  const uint64_t row = ht_route_row_bytes(K);
  ht::PackArgs pack;
  pack.seg[0] = segment(topk_idx, 0);
  pack.num_segments = 1;
  pack.num_rows = static_cast<int>(N);
  pack.pos = ptr<const int32_t>(t.pos);
  send_exchange(ra.send_rows, nullptr, pack, row, stream);
  int64_t* const counts = counts_.as<int64_t>();
  cuda_check(cudaMemcpyAsync(counts, ra.send_rows, sizeof(int64_t) * nodes(), cudaMemcpyDeviceToDevice, stream), kWho,
             "copy the sent counts");
  cuda_check(
      cudaMemcpyAsync(t.recv_rows.data, counts + kCounts, sizeof(int64_t) * nodes(), cudaMemcpyDeviceToDevice, stream),
      kWho, "keep the received counts");
  const std::vector<int64_t> h = to_host(counts, 2 * kCounts, stream, "the rail exchange of the routing");
  int64_t most_sent = 0, most_recv = 0;
  for (int n = 0; n < nodes(); ++n) {
    const int64_t sent = h[n], recv = h[kCounts + n];
    c.sent_rows += sent;
    c.forward_rows += recv;
    most_sent = std::max(most_sent, sent);
    most_recv = std::max(most_recv, recv);
  }
  c.most_sent = most_sent;
  // The pass's dispatch sends as many rows per node, wider; its combine sends back what came.
  net_->check_fits(most_sent, ht_dispatch_row_bytes(rows, K), "dispatch");
  net_->check_fits(most_recv, ht_combine_row_bytes(rows, K), "combine");
  reserve(std::max(c.forward_rows, c.sent_rows), rows);
  finish_exchange(row, stream);
  return c;
}

HTInternodeRoute HTInternode::route_finish(const HTInternodeCounts& c, const HTInternodeTables& t,
                                           const HTConfig& config, int64_t expert_alignment, int64_t num_worst_tokens,
                                           cudaStream_t stream) {
  ready();
  HTInternodeRoute r;
  static_cast<HTInternodeCounts&>(r) = c;
  r.dispatch_config = config;
  r.expert_alignment = expert_alignment;
  r.num_worst_tokens = num_worst_tokens;
  const int64_t m1 = c.forward_rows, K = c.num_topk, L = c.num_experts / num_ranks_;
  expect(t.topk_node.present() && t.topk_node.dtype == DType::kInt64 && t.topk_node.ndim == 2 &&
             t.topk_node.contiguous() && t.topk_node.shape[0] >= m1 && t.topk_node.shape[1] == K,
         [&] { return "the pass's topk_node table must be int64 [>= " + to_string(m1) + ", " + to_string(K) + "]"; });
  // The ids this rank forwards, numbered inside the node (-1: another node's expert).
  const TensorRef topk_node = first_rows(t.topk_node, m1);
  ht::RowSegment seg = segment(topk_node, 0);
  seg.renumber_base = int64_t(rank_ / k_) * k_ * L;
  seg.renumber_span = k_ * L;
  unpack(&seg, 1, m1, ht_route_row_bytes(K), stream);

  // The node's layout and counts exchange, for the node dispatch's inputs (the stage rows).
  HTLayoutIn nin;
  nin.topk_idx = topk_node;
  nin.num_experts = k_ * L;
  const HTLayoutPlan nlp = validate_ht_layout(nin, node_->info());
  node_->get_dispatch_layout(nin, nlp, t.ntpr, t.ntpe, first_rows(t.itir, m1), stream);
  const HTDispatchIn din = node_input(r, r.rows, t);
  r.node_plan = validate_ht_dispatch(din, node_->info());
  HTBuffer::Counts n = node_->notify(din, r.node_plan, t.rpm, t.cpm, stream);
  r.num_recv = n.num_recv;
  r.per_expert = std::move(n.per_expert);
  return r;
}

HTDispatchIn HTInternode::node_input(const HTInternodeRoute& r, const HTInternodeRows& rows,
                                     const HTInternodeTables& t) const {
  const int64_t m1 = r.forward_rows;
  HTDispatchIn in;
  in.x = view(stage_.data(), rows.x_dtype, m1, rows.hidden, device_);
  if (rows.scale_cols > 0) in.x_scales = view(stage_scales(), rows.scale_dtype, m1, rows.scale_cols, device_);
  in.topk_idx = first_rows(t.topk_node, m1);
  in.topk_weights = view(stage_weights(), DType::kFloat32, m1, r.num_topk, device_);
  in.num_tokens_per_rank = t.ntpr;
  in.is_token_in_rank = first_rows(t.itir, m1);
  in.num_tokens_per_expert = t.ntpe;
  in.expert_alignment = r.expert_alignment;
  in.num_worst_tokens = r.num_worst_tokens;
  in.config = r.dispatch_config;
  return in;
}

void HTInternode::dispatch(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x,
                           const TensorRef& x_scales, const TensorRef& topk_weights, const HTDispatchOut& out,
                           cudaStream_t stream) {
  ready();
  const int64_t N = r.num_tokens, K = r.num_topk;
  const uint64_t x_bytes = uint64_t(r.rows.hidden) * dtype_bytes(r.rows.x_dtype);
  expect_tensor(x, "x", r.rows.x_dtype, 2, device_);
  expect(x.shape[0] == N && x.shape[1] == r.rows.hidden, [&] {
    return "x must be [" + to_string(N) + ", " + to_string(r.rows.hidden) + "] (the pass's), got " + shape_str(x);
  });
  if (r.rows.scale_cols > 0)
    expect(x_scales.present() && x_scales.dtype == r.rows.scale_dtype && x_scales.ndim == 2 && x_scales.shape[0] == N &&
               x_scales.shape[1] == r.rows.scale_cols && x_scales.device == device_,
           [&] {
             return "x_scales must be " + std::string(dtype_name(r.rows.scale_dtype)) + " [" + to_string(N) + ", " +
                    to_string(r.rows.scale_cols) + "] on device " + to_string(device_);
           });
  expect(topk_weights.present() && topk_weights.dtype == DType::kFloat32 && topk_weights.ndim == 2 &&
             topk_weights.shape[0] == N && topk_weights.shape[1] == K && topk_weights.device == device_,
         [&] { return "topk_weights must be float32 [" + to_string(N) + ", " + to_string(K) + "]"; });
  const uint64_t row = ht_dispatch_row_bytes(r.rows, K);
  ht::PackArgs pack;
  int s = 0;
  pack.seg[s++] = segment(x, 0);
  if (r.rows.scale_cols > 0) pack.seg[s++] = segment(x_scales, x_bytes);
  pack.seg[s++] = segment(topk_weights, x_bytes + 4 * uint64_t(r.rows.scale_cols));
  pack.num_segments = s;
  pack.num_rows = static_cast<int>(N);
  pack.pos = ptr<const int32_t>(t.pos);
  send_exchange(ptr<const int64_t>(t.send_rows), ptr<const int64_t>(t.recv_rows), pack, row, stream);
  finish_exchange(row, stream);

  // The rows this rank forwards, into the node dispatch's inputs.
  const HTDispatchIn in = node_input(r, r.rows, t);
  ht::RowSegment seg[3];
  s = 0;
  seg[s++] = segment(in.x, 0);
  if (r.rows.scale_cols > 0) seg[s++] = segment(in.x_scales, x_bytes);
  seg[s++] = segment(in.topk_weights, x_bytes + 4 * uint64_t(r.rows.scale_cols));
  unpack(seg, s, r.forward_rows, row, stream);
  node_->dispatch(in, r.node_plan, r.num_recv, t.rpm, t.cpm, out, stream);
}

HTInternodeRows HTInternode::rows_of(const HTInternodeRoute& r, const TensorRef& x, const TensorRef& x_scales) const {
  const int64_t N = r.num_tokens;
  expect(x.present() && x.ndim == 2 && x.shape[0] == N && x.shape[1] == r.rows.hidden, [&] {
    return "x must be [" + to_string(N) + ", " + to_string(r.rows.hidden) + "] (the handle's dispatch's), got " +
           shape_str(x);
  });
  HTInternodeRows rows;
  rows.hidden = r.rows.hidden;
  rows.x_dtype = x.dtype;
  expect_tensor(x, "x", x.dtype, 2, device_);
  if (x.dtype == DType::kFloat8_e4m3fn) {
    expect(x_scales.present() && x_scales.ndim == 2 && x_scales.shape[0] == N && dtype_bytes(x_scales.dtype) == 4 &&
               x_scales.device == device_,
           [&] { return "an FP8 x needs x_scales, 4-byte elements [" + to_string(N) + ", hidden / 128 or / 512]"; });
    rows.scale_dtype = x_scales.dtype;
    rows.scale_cols = x_scales.shape[1];
  } else {
    expect(x.dtype == DType::kBFloat16 && !x_scales.present(),
           [&] { return std::string("x must be bfloat16 (no x_scales) or float8_e4m3fn with x_scales"); });
  }
  return rows;
}

void HTInternode::cached_dispatch(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x,
                                  const TensorRef& x_scales, const TensorRef& recv_x, const TensorRef& recv_x_scales,
                                  cudaStream_t stream) {
  ready();
  const HTInternodeRows rows = rows_of(r, x, x_scales);
  const uint64_t x_bytes = uint64_t(rows.hidden) * dtype_bytes(rows.x_dtype);
  // Weights left out; the blocks hold the pass's rows at this width, and the stage their rows.
  const uint64_t row = ht_dispatch_row_bytes(rows, 0);
  net_->check_fits(r.most_sent, row, "cached dispatch");
  reserve(std::max(r.forward_rows, r.sent_rows), rows);
  ht::PackArgs pack;
  int s = 0;
  pack.seg[s++] = segment(x, 0);
  if (rows.scale_cols > 0) pack.seg[s++] = segment(x_scales, x_bytes);
  pack.num_segments = s;
  pack.num_rows = static_cast<int>(r.num_tokens);
  pack.pos = ptr<const int32_t>(t.pos);
  send_exchange(ptr<const int64_t>(t.send_rows), ptr<const int64_t>(t.recv_rows), pack, row, stream);
  finish_exchange(row, stream);

  HTDispatchIn in = node_input(r, rows, t);
  ht::RowSegment seg[2];
  s = 0;
  seg[s++] = segment(in.x, 0);
  if (rows.scale_cols > 0) seg[s++] = segment(in.x_scales, x_bytes);
  unpack(seg, s, r.forward_rows, row, stream);
  // The node's cached dispatch: the pass's prefix matrices and count (a barrier, no counts).
  in.topk_idx = TensorRef();
  in.topk_weights = TensorRef();
  in.num_tokens_per_rank = TensorRef();
  in.num_tokens_per_expert = TensorRef();
  in.cached_rank_prefix_matrix = t.rpm;
  in.cached_channel_prefix_matrix = t.cpm;
  in.cached_num_recv_tokens = r.num_recv;
  in.num_worst_tokens = 0;
  const HTDispatchPlan p = validate_ht_dispatch(in, node_->info());
  const HTBuffer::Counts n = node_->notify(in, p, t.rpm, t.cpm, stream);
  HTDispatchOut out;
  out.recv_x = recv_x;
  out.recv_x_scales = recv_x_scales;
  out.recv_channel_prefix_matrix = t.rcpm;
  out.recv_src_idx = first_rows(t.src_idx, n.num_recv);
  out.send_head = first_rows(t.send_head, r.forward_rows);
  node_->dispatch(in, p, n.num_recv, t.rpm, t.cpm, out, stream);
}

void HTInternode::combine(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x,
                          const TensorRef& topk_weights, const TensorRef& bias0, const TensorRef& bias1,
                          const HTConfig& config, const TensorRef& out, const TensorRef& out_weights,
                          cudaStream_t stream) {
  ready();
  const int64_t N = r.num_tokens, K = r.num_topk, m1 = r.forward_rows, H = r.rows.hidden;
  // Inside the node: one row per token this rank forwarded, summed over the node's ranks.
  expect_tensor(x, "x", DType::kBFloat16, 2, device_);
  expect(x.shape[0] == r.num_recv, [&] {
    return "x has " + to_string(x.shape[0]) + " rows; the handle's dispatch received " + to_string(r.num_recv) +
           " (combine takes the dispatch's recv_x layout)";
  });
  HTCombineIn in;
  in.x = x;
  in.topk_weights = topk_weights;
  in.src_idx = first_rows(t.src_idx, r.num_recv);
  in.rank_prefix_matrix = t.rpm;
  in.recv_channel_prefix_matrix = t.rcpm;
  in.send_head = first_rows(t.send_head, m1);
  in.config = config;
  const HTCombinePlan p = validate_ht_combine(in, node_->info());
  expect(p.hidden == H, [&] { return "x has hidden " + to_string(p.hidden) + ", the dispatch's " + to_string(H); });
  expect_output(out, contiguous_spec(DType::kBFloat16, {N, H}), "combined_x", device_);
  if (p.out_weights.present) {
    expect(p.num_topk == K, [&] { return "topk_weights must have " + to_string(K) + " columns (the dispatch's)"; });
    expect_output(out_weights, contiguous_spec(DType::kFloat32, {N, K}), "combined_topk_weights", device_);
  }
  for (const TensorRef* b : {&bias0, &bias1})
    if (b->present()) {
      expect_tensor(*b, "bias", DType::kBFloat16, 2, device_);
      expect(b->shape[0] == N && b->shape[1] == H,
             [&] { return "bias must be bfloat16 [" + to_string(N) + ", " + to_string(H) + "]"; });
    }
  const TensorRef y1 = view(stage_.data(), DType::kBFloat16, m1, H, device_);
  TensorRef w1;
  if (p.out_weights.present) w1 = view(stage_weights(), DType::kFloat32, m1, K, device_);
  node_->combine(in, p, y1, w1, stream);

  // Back home: row j of y1 came from the node whose block held it (blocks are node by node).
  const uint64_t row = ht_combine_row_bytes(r.rows, K);
  ht::PackArgs pack;
  pack.seg[0] = segment(y1, 0);
  pack.num_segments = 1;
  if (w1.present()) pack.seg[pack.num_segments++] = segment(w1, 2 * uint64_t(H));
  pack.num_rows = static_cast<int>(m1);
  pack.node_rows = ptr<const int64_t>(t.recv_rows);
  send_exchange(ptr<const int64_t>(t.recv_rows), ptr<const int64_t>(t.send_rows), pack, row, stream);
  finish_exchange(row, stream);

  ht::HomeSumArgs hs;
  hs.rows = rows_.data();
  hs.row_bytes = row;
  hs.pos = ptr<const int32_t>(t.pos);
  hs.send_rows = ptr<const int64_t>(t.send_rows);
  hs.num_tokens = static_cast<int>(N);
  hs.nodes = nodes();
  hs.hidden = static_cast<int>(H);
  hs.num_topk = static_cast<int>(K);
  hs.weights_offset = 2 * uint64_t(H);
  hs.bias0 = ptr<const uint16_t>(bias0);
  hs.bias1 = ptr<const uint16_t>(bias1);
  hs.out = ptr<uint16_t>(out);
  hs.out_weights = w1.present() ? ptr<float>(out_weights) : nullptr;
  cuda_check(ht::launch_home_sum(hs, stream), kWho, "home sum launch");
}

}  // namespace anyep::runtime
