#include "runtime/ht_internode.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/cuda_check.h"
#include "common/env.h"
#include "common/error.h"
#include "kernels/ht_internode_protocol.h"
#include "runtime/check.h"

namespace anyep::runtime {
namespace {

using std::to_string;

void cuda_check(cudaError_t e, const std::string& what) { anyep::cuda_check(e, "anyep HT internode", what); }

uint64_t pad16(uint64_t n) { return (n + 15) & ~uint64_t{15}; }

// The first `rows` rows of a row-major table (its storage unchanged).
TensorRef first_rows(TensorRef t, int64_t rows) {
  t.shape[0] = rows;
  return t;
}

// A row-major view of scratch memory.
TensorRef view(void* data, DType d, int64_t rows, int64_t cols, int device) {
  return contiguous_ref(data, d, {rows, cols}, device);
}

// A segment of `words` 4-byte words from a 2-D tensor (any strides), at byte `offset` of the row.
ht::RowSegment segment(const TensorRef& t, int32_t offset) {
  const int64_t eb = dtype_bytes(t.dtype);
  ht::RowSegment s;
  s.base = static_cast<uint8_t*>(t.data);
  s.row_stride = t.strides[0] * eb;
  s.word_stride = t.strides[1] * eb;  // 4-byte elements (scales, weights) or contiguous rows (x, ids)
  s.words = static_cast<int32_t>(t.shape[1] * eb / 4);
  s.offset = offset;
  if (eb != 4) s.word_stride = 4;  // rows of x (1- or 2-byte elements) and of int64 ids are contiguous
  return s;
}

}  // namespace

int64_t HTInternode::exchange_bytes(const HTInternodeShape& s, int nodes) {
  const uint64_t K = ht::kMaxTopk;
  const uint64_t x_bytes = uint64_t(s.hidden) * uint64_t(dtype_bytes(s.x_dtype));
  const uint64_t widest = std::max(
      {pad16(8 * K), pad16(x_bytes + 4 * uint64_t(s.scale_cols) + 4 * K), pad16(2 * uint64_t(s.hidden) + 4 * K)});
  return static_cast<int64_t>(ht::internode::Exchange::region_bytes(uint64_t(s.max_tokens), widest, nodes));
}

uint64_t HTInternode::dispatch_row_bytes(int64_t K) const {
  return pad16(uint64_t(shape_.hidden) * uint64_t(dtype_bytes(shape_.x_dtype)) + 4 * uint64_t(shape_.scale_cols) +
               4 * uint64_t(K));
}
uint64_t HTInternode::combine_row_bytes(int64_t K) const {
  return pad16(2 * uint64_t(shape_.hidden) + 4 * uint64_t(K));
}

HTInternode::HTInternode(int rank, int num_ranks, int ranks_per_node, int64_t nvl_bytes, const HTInternodeShape& shape,
                         int device)
    : rank_(rank), num_ranks_(num_ranks), k_(ranks_per_node), device_(device), shape_(shape) {
  if (shape.max_tokens < 1 || shape.hidden < 1 || shape.num_experts < 1)
    throw InvalidArgument("anyep HT internode: the shape needs max_tokens, hidden and num_experts >= 1");
  if (ranks_per_node < 1 || num_ranks % ranks_per_node != 0)
    throw InvalidArgument("anyep HT internode: " + to_string(num_ranks) + " ranks are not whole nodes of " +
                          to_string(ranks_per_node));
  const int nodes = num_ranks / ranks_per_node;
  net_ = std::make_unique<HTNet>(rank, num_ranks, ranks_per_node, exchange_bytes(shape, nodes), device);
  node_ = std::make_unique<HTBuffer>(rank % ranks_per_node, ranks_per_node, nvl_bytes, device);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  const uint64_t rows = uint64_t(max_forward_rows());
  const uint64_t x_bytes = uint64_t(shape.hidden) * uint64_t(dtype_bytes(shape.x_dtype));
  const uint64_t widest = std::max(dispatch_row_bytes(ht::kMaxTopk), combine_row_bytes(ht::kMaxTopk));
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&rows_),
                        std::max<uint64_t>(rows * std::max(widest, pad16(8 * ht::kMaxTopk)), 16)),
             "cudaMalloc exchange rows");
  const uint64_t stage = rows * (std::max(x_bytes, 2 * uint64_t(shape.hidden)) + 4 * uint64_t(shape.scale_cols) +
                                 4 * uint64_t(ht::kMaxTopk));
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&stage_), std::max<uint64_t>(stage, 16)), "cudaMalloc stage rows");
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&counts_), sizeof(int64_t) * ht::internode::kMaxNodes),
             "cudaMalloc exchange counts");
  cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host_), sizeof(int64_t) * ht::internode::kMaxNodes),
             "cudaMallocHost host counts");
  cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
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
  cudaDeviceSynchronize();
  if (node_) node_->destroy();
  if (net_) net_->destroy();
  if (rows_) cudaFree(rows_);
  if (stage_) cudaFree(stage_);
  if (counts_) cudaFree(counts_);
  if (host_) cudaFreeHost(host_);
  if (event_) cudaEventDestroy(event_);
  rows_ = stage_ = nullptr;
  counts_ = host_ = nullptr;
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
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
}

std::vector<int64_t> HTInternode::to_host(const int64_t* src, int n, cudaStream_t stream, const char* what) {
  cuda_check(cudaMemcpyAsync(host_, src, sizeof(int64_t) * n, cudaMemcpyDeviceToHost, stream), what);
  cuda_check(cudaEventRecord(event_, stream), what);
  // Every kernel wait ends within ANYEP_TIMEOUT_S; the margin covers the stages queued before.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(2 * timeout_ns_) + std::chrono::seconds(10);
  for (;;) {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) cuda_check(e, what);
    if (std::chrono::steady_clock::now() > deadline) {
      check_error();  // a peer's timeout found on the device names it
      throw TimeoutError(std::string("anyep HT internode: rank ") + to_string(rank_) + ": " + what +
                         " did not complete within twice ANYEP_TIMEOUT_S (+10 s)");
    }
    std::this_thread::yield();
  }
  check_error();
  return std::vector<int64_t>(host_, host_ + n);
}

void HTInternode::exchange(const int64_t* send_rows, const int64_t* expect_rows, ht::PackArgs pack, uint64_t row_bytes,
                           cudaStream_t stream) {
  const ht::internode::Exchange ex = net_->exchange();
  net_->begin(stream);
  pack.nodes = nodes();
  pack.row_bytes = row_bytes;
  pack.send_area = net_->region() + ex.send_off(0) + ht::internode::kBlockHeaderBytes;
  pack.block_bytes = ex.block_bytes();
  pack.capacity = ex.row_capacity(row_bytes);
  cuda_check(ht::launch_pack(pack, stream), "pack launch");
  net_->send(send_rows, expect_rows, counts_, row_bytes, stream);
  net_->finish(counts_, rows_, row_bytes, stream);
}

OutputSpec HTInternode::combine_output(const HTInternodeRoute& r, int64_t hidden) {
  return contiguous_spec(DType::kBFloat16, {r.num_tokens, hidden});
}
OutputSpec HTInternode::combine_output_weights(const HTInternodeRoute& r) {
  return contiguous_spec(DType::kFloat32, {r.num_tokens, r.num_topk});
}

HTInternodeRoute HTInternode::route(const TensorRef& topk_idx, const HTInternodeTables& t, const HTConfig& config,
                                    int64_t expert_alignment, cudaStream_t stream) {
  ready();
  // Every check of the layout over all ranks (dtype, shape, device, num_experts).
  HTLayoutIn lin;
  lin.topk_idx = topk_idx;
  lin.num_experts = shape_.num_experts;
  const HTBufferInfo all{rank_, num_ranks_, device_, 0, node_->info().device_sms};
  const HTLayoutPlan lp = validate_ht_layout(lin, all);
  HTInternodeRoute r;
  r.num_tokens = lp.num_tokens;
  r.num_topk = lp.num_topk;
  const int64_t N = r.num_tokens, K = r.num_topk, L = shape_.num_experts / num_ranks_;
  if (N > shape_.max_tokens)
    throw InvalidArgument("anyep HT internode: topk_idx has " + to_string(N) + " tokens, more than max_tokens " +
                          to_string(shape_.max_tokens));

  ht::RouteArgs ra;
  ra.topk_idx = static_cast<const int64_t*>(topk_idx.data);
  ra.num_tokens = static_cast<int>(N);
  ra.num_topk = static_cast<int>(K);
  ra.nodes = nodes();
  ra.num_experts = shape_.num_experts;
  ra.experts_per_node = L * k_;
  ra.pos = static_cast<int32_t*>(t.pos.data);
  ra.send_rows = static_cast<int64_t*>(t.send_rows.data);
  ra.err = net_->error_record();
  ra.rank = rank_;
  cuda_check(ht::launch_route(ra, stream), "route launch");

  // The top-k ids cross the rail exchange; the host learns how many rows it forwards.
  const uint64_t row = pad16(8 * uint64_t(K));
  ht::PackArgs pack;
  pack.seg[0] = segment(topk_idx, 0);
  pack.num_segments = 1;
  pack.num_rows = static_cast<int>(N);
  pack.pos = static_cast<const int32_t*>(t.pos.data);
  exchange(ra.send_rows, nullptr, pack, row, stream);
  cuda_check(cudaMemcpyAsync(t.recv_rows.data, counts_, sizeof(int64_t) * nodes(), cudaMemcpyDeviceToDevice, stream),
             "keep the received counts");
  const std::vector<int64_t> got = to_host(counts_, nodes(), stream, "the rail exchange of the routing");
  int64_t m1 = 0;
  for (int64_t c : got) m1 += c;
  if (m1 < 0 || m1 > max_forward_rows())
    throw InternalError("anyep HT internode: the rail exchange reported " + to_string(m1) + " rows, outside [0, " +
                        to_string(max_forward_rows()) + "]");
  r.forward_rows = m1;

  // The ids this rank forwards, numbered inside the node (-1: another node's expert).
  ht::UnpackArgs un;
  const TensorRef topk_node = first_rows(t.topk_node, m1);
  un.seg[0] = segment(topk_node, 0);
  un.seg[0].renumber_base = int64_t(rank_ / k_) * k_ * L;
  un.seg[0].renumber_span = k_ * L;
  un.num_segments = 1;
  un.num_rows = static_cast<int>(m1);
  un.rows = rows_;
  un.row_bytes = row;
  cuda_check(ht::launch_unpack(un, stream), "unpack launch");

  // The node's layout and counts exchange, for the node dispatch's inputs (the stage rows).
  HTLayoutIn nin;
  nin.topk_idx = topk_node;
  nin.num_experts = k_ * L;
  const HTLayoutPlan nlp = validate_ht_layout(nin, node_->info());
  const TensorRef itir = first_rows(t.itir, m1);
  node_->get_dispatch_layout(nin, nlp, t.ntpr, t.ntpe, itir, stream);
  const HTDispatchIn din = node_input(t, m1, K, config, expert_alignment);
  r.node_plan = validate_ht_dispatch(din, node_->info());
  HTBuffer::Counts c = node_->notify(din, r.node_plan, t.rpm, t.cpm, stream);
  r.num_recv = c.num_recv;
  r.per_expert = std::move(c.per_expert);
  return r;
}

HTDispatchIn HTInternode::node_input(const HTInternodeTables& t, int64_t m1, int64_t K, const HTConfig& config,
                                     int64_t expert_alignment) const {
  const uint64_t rows = uint64_t(max_forward_rows());
  const uint64_t x_area =
      rows * std::max<uint64_t>(uint64_t(shape_.hidden) * dtype_bytes(shape_.x_dtype), 2 * uint64_t(shape_.hidden));
  HTDispatchIn in;
  in.x = view(stage_, shape_.x_dtype, m1, shape_.hidden, device_);
  if (shape_.scale_cols > 0) in.x_scales = view(stage_ + x_area, shape_.scale_dtype, m1, shape_.scale_cols, device_);
  in.topk_idx = first_rows(t.topk_node, m1);
  in.topk_weights = view(stage_ + x_area + rows * 4 * uint64_t(shape_.scale_cols), DType::kFloat32, m1, K, device_);
  in.num_tokens_per_rank = t.ntpr;
  in.is_token_in_rank = first_rows(t.itir, m1);
  in.num_tokens_per_expert = t.ntpe;
  in.expert_alignment = expert_alignment;
  in.config = config;
  return in;
}

void HTInternode::dispatch(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x,
                           const TensorRef& x_scales, const TensorRef& topk_weights, const HTConfig& config,
                           int64_t expert_alignment, const HTDispatchOut& out, cudaStream_t stream) {
  ready();
  const int64_t N = r.num_tokens, K = r.num_topk, m1 = r.forward_rows;
  const int64_t x_bytes = shape_.hidden * dtype_bytes(shape_.x_dtype);
  if (!x.contiguous()) throw InvalidArgument("anyep HT internode: x must be contiguous");
  const uint64_t row = dispatch_row_bytes(K);
  ht::PackArgs pack;
  int s = 0;
  pack.seg[s++] = segment(x, 0);
  if (shape_.scale_cols > 0) pack.seg[s++] = segment(x_scales, static_cast<int32_t>(x_bytes));
  pack.seg[s++] = segment(topk_weights, static_cast<int32_t>(x_bytes + 4 * shape_.scale_cols));
  pack.num_segments = s;
  pack.num_rows = static_cast<int>(N);
  pack.pos = static_cast<const int32_t*>(t.pos.data);
  exchange(static_cast<const int64_t*>(t.send_rows.data), static_cast<const int64_t*>(t.recv_rows.data), pack, row,
           stream);

  // The rows this rank forwards, into the node dispatch's inputs.
  const HTDispatchIn in = node_input(t, m1, K, config, expert_alignment);
  ht::UnpackArgs un;
  s = 0;
  un.seg[s++] = segment(in.x, 0);
  if (shape_.scale_cols > 0) un.seg[s++] = segment(in.x_scales, static_cast<int32_t>(x_bytes));
  un.seg[s++] = segment(in.topk_weights, static_cast<int32_t>(x_bytes + 4 * shape_.scale_cols));
  un.num_segments = s;
  un.num_rows = static_cast<int>(m1);
  un.rows = rows_;
  un.row_bytes = row;
  cuda_check(ht::launch_unpack(un, stream), "unpack launch");
  node_->dispatch(in, r.node_plan, r.num_recv, t.rpm, t.cpm, out, stream);
}

void HTInternode::combine(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x,
                          const TensorRef& topk_weights, const HTConfig& config, const TensorRef& out,
                          const TensorRef& out_weights, cudaStream_t stream) {
  ready();
  const int64_t N = r.num_tokens, K = r.num_topk, m1 = r.forward_rows, H = shape_.hidden;
  // Inside the node: one row per token this rank forwarded, summed over the node's ranks.
  HTCombineIn in;
  in.x = x;
  in.topk_weights = topk_weights;
  in.src_idx = t.src_idx;
  in.src_idx.shape[0] = r.num_recv;
  in.rank_prefix_matrix = t.rpm;
  in.recv_channel_prefix_matrix = t.rcpm;
  in.send_head = first_rows(t.send_head, m1);
  in.config = config;
  const HTCombinePlan p = validate_ht_combine(in, node_->info());
  if (p.hidden != H)
    throw InvalidArgument("anyep HT internode combine: x has hidden " + to_string(p.hidden) + ", the group's is " +
                          to_string(H));
  expect_output(out, combine_output(r, H), "out", device_);
  if (p.out_weights.present) expect_output(out_weights, combine_output_weights(r), "out_topk_weights", device_);
  const uint64_t rows = uint64_t(max_forward_rows());
  const TensorRef y1 = view(stage_, DType::kBFloat16, m1, H, device_);
  const uint64_t x_area = rows * std::max<uint64_t>(uint64_t(H) * dtype_bytes(shape_.x_dtype), 2 * uint64_t(H));
  TensorRef w1;
  if (p.out_weights.present)
    w1 = view(stage_ + x_area + rows * 4 * uint64_t(shape_.scale_cols), DType::kFloat32, m1, K, device_);
  node_->combine(in, p, y1, w1, stream);

  // Back home: row j of y1 came from the node whose block held it (blocks are node by node).
  const uint64_t row = combine_row_bytes(K);
  ht::PackArgs pack;
  pack.seg[0] = segment(y1, 0);
  pack.num_segments = 1;
  if (w1.present()) pack.seg[pack.num_segments++] = segment(w1, static_cast<int32_t>(2 * H));
  pack.num_rows = static_cast<int>(m1);
  pack.node_rows = static_cast<const int64_t*>(t.recv_rows.data);
  exchange(static_cast<const int64_t*>(t.recv_rows.data), static_cast<const int64_t*>(t.send_rows.data), pack, row,
           stream);

  ht::HomeSumArgs hs;
  hs.rows = rows_;
  hs.row_bytes = row;
  hs.pos = static_cast<const int32_t*>(t.pos.data);
  hs.send_rows = static_cast<const int64_t*>(t.send_rows.data);
  hs.num_tokens = static_cast<int>(N);
  hs.nodes = nodes();
  hs.hidden = static_cast<int>(H);
  hs.num_topk = static_cast<int>(K);
  hs.weights_offset = 2 * uint64_t(H);
  hs.out = static_cast<uint16_t*>(out.data);
  hs.out_weights = w1.present() ? static_cast<float*>(out_weights.data) : nullptr;
  cuda_check(ht::launch_home_sum(hs, stream), "home sum launch");
}

}  // namespace anyep::runtime
