#include "runtime/ht/buffer.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "common/cuda_check.h"
#include "common/env.h"
#include "common/error.h"
#include "kernels/preload.h"
#include "runtime/common/check.h"
#include "runtime/common/ipc_peers.h"

namespace anyep::runtime {
namespace {

constexpr uint32_t kHTRecordMagic = 0x41485431;  // "AHT1"

constexpr const char* kWho = "anyep HT";  // what cuda_check's messages start with

template <typename T>
T* ptr(const TensorRef& t) {
  return t.present() ? static_cast<T*>(t.data) : nullptr;
}

}  // namespace

HTBuffer::HTBuffer(int rank, int num_ranks, int64_t num_bytes, int device)
    : rank_(rank), num_ranks_(num_ranks), num_bytes_(num_bytes) {
  using std::to_string;
  if (num_ranks <= 0 || rank < 0 || rank >= num_ranks)
    throw InvalidArgument("anyep HT: rank " + to_string(rank) + " out of range for " + to_string(num_ranks) + " ranks");
  if (num_ranks > ht::kMaxRanks)
    throw Unsupported("anyep HT: " + to_string(num_ranks) +
                      " ranks; intranode high-throughput mode reaches at most 16 ranks by direct stores "
                      "(internode HT over the proxy is not built yet)");
  if (num_bytes < static_cast<int64_t>(ht::kRingsOff))
    throw InvalidArgument("anyep HT: num_nvl_bytes=" + to_string(num_bytes) + " is below the " +
                          to_string(ht::kRingsOff) + " bytes of control data (see Config.get_nvl_buffer_size_hint)");
  if (device < 0) {
    cuda_check(cudaGetDevice(&device_), kWho, "cudaGetDevice");
  } else {
    device_ = device;
    cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  }
  cuda_check(preload_kernels(), kWho, "load the anyep kernels (kernels/preload.h)");
  cuda_check(cudaDeviceGetAttribute(&device_sms_, cudaDevAttrMultiProcessorCount, device_), kWho, "SM count");
  region_ = DeviceRegion(static_cast<size_t>(num_bytes), "anyep HT region", false);
  // Only the control part needs zeroes (barrier words, ring totals); ring slots are written before read.
  region_.zero(ht::kRingsOff);
  err_ = MappedHostRegion(sizeof(ErrorRecord), "anyep HT error record");
  counters_ = MappedHostRegion(sizeof(int32_t) * (1 + ht::kMaxLocalExperts), "anyep HT receive counters");
  std::memset(counters_.host(), 0xff, counters_.size());
  peers_ = IpcPeers(num_ranks, "anyep HT peer table");
  cuda_check(cudaDeviceSynchronize(), kWho, "HT buffer set-up");
  timeout_ns_ = env::get_duration_ns("ANYEP_TIMEOUT_S");
}

HTBuffer::~HTBuffer() {
  try {
    destroy();
  } catch (...) {
    // Destructors must not throw; destroy() called explicitly reports errors.
  }
}

void HTBuffer::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();  // no kernel of this rank still uses the memory below
  peers_.close();           // the peers' regions are unmapped before this one is freed
  region_.reset();
  err_.reset();
  counters_.reset();
  connected_ = false;
}

std::vector<uint8_t> HTBuffer::local_info() const {
  if (destroyed_) throw InvalidArgument("anyep HT: buffer was destroyed");
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  return make_ipc_record(kHTRecordMagic, rank_, device_, region_.data(), num_bytes_);
}

void HTBuffer::connect(const std::vector<std::vector<uint8_t>>& infos) {
  if (destroyed_) throw InvalidArgument("anyep HT: buffer was destroyed");
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  const std::vector<IpcRecord> recs =
      parse_ipc_records(infos, kHTRecordMagic, num_ranks_, num_bytes_, "anyep HT connect");
  peers_.open(recs, rank_, region_.data(), device_, true, "anyep HT connect");
  if (const int r = peers_.first_unreachable(); r >= 0)
    throw Unsupported("anyep HT: rank " + std::to_string(r) +
                      " is not reachable by direct stores (NVLink/CUDA IPC) from rank " + std::to_string(rank_) +
                      "; high-throughput mode over the proxy (internode) is not built yet");
  connected_ = true;
}

std::string HTBuffer::describe_paths() const {
  std::string out = "HT: direct stores (CUDA IPC) to ranks 0-";
  out += std::to_string(num_ranks_ - 1);
  out += connected_ ? "" : " (not connected)";
  return out;
}

ht::Ctx HTBuffer::ctx() const {
  ht::Ctx x;
  x.rank = rank_;
  x.R = num_ranks_;
  x.local = region_.data();
  x.peers = peers_.device_table();
  x.err = err_.device_as<ErrorRecord>();
  x.timeout_ns = timeout_ns_;
  return x;
}

void HTBuffer::ready() const {
  if (destroyed_) throw InvalidArgument("anyep HT: buffer was destroyed");
  if (!connected_) throw InvalidArgument("anyep HT: buffer not connected");
  check_error();
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
}

void HTBuffer::get_dispatch_layout(const HTLayoutIn& in, const HTLayoutPlan& p, const TensorRef& ntpr,
                                   const TensorRef& ntpe, const TensorRef& itir, cudaStream_t stream) {
  ready();
  expect_output(ntpr, p.num_tokens_per_rank, "num_tokens_per_rank", device_);
  expect_output(ntpe, p.num_tokens_per_expert, "num_tokens_per_expert", device_);
  expect_output(itir, p.is_token_in_rank, "is_token_in_rank", device_);
  ht::LayoutArgs a;
  a.topk_idx = ptr<const int64_t>(in.topk_idx);
  a.num_tokens = static_cast<int>(p.num_tokens);
  a.num_topk = static_cast<int>(p.num_topk);
  a.num_experts = static_cast<int>(in.num_experts);
  a.num_ranks = num_ranks_;
  a.num_tokens_per_rank = ptr<int32_t>(ntpr);
  a.num_tokens_per_expert = ptr<int32_t>(ntpe);
  a.is_token_in_rank = ptr<bool>(itir);
  a.err = err_.device_as<ErrorRecord>();
  a.rank = rank_;
  cuda_check(ht::launch_layout(a, stream), kWho, "get_dispatch_layout launch");
}

HTBuffer::Counts HTBuffer::notify(const HTDispatchIn& in, const HTDispatchPlan& p, const TensorRef& rpm,
                                  const TensorRef& cpm, cudaStream_t stream) {
  ready();
  Counts out;
  if (p.cached) {
    cuda_check(ht::launch_barrier(ctx(), stream), kWho, "HT barrier launch");
    out.num_recv = in.cached_num_recv_tokens;
    return out;
  }
  expect_output(rpm, p.rank_prefix_matrix, "rank_prefix_matrix", device_);
  expect_output(cpm, p.channel_prefix_matrix, "channel_prefix_matrix", device_);
  const bool worst = in.num_worst_tokens > 0;
  const int L = static_cast<int>(p.num_local_experts);
  ht::NotifyArgs a;
  a.x = ctx();
  a.g = p.g;
  a.num_tokens = static_cast<int>(p.num_tokens);
  a.num_local_experts = L;
  a.num_tokens_per_rank = ptr<const int32_t>(in.num_tokens_per_rank);
  a.num_tokens_per_expert = ptr<const int32_t>(in.num_tokens_per_expert);
  a.is_token_in_rank = ptr<const bool>(in.is_token_in_rank);
  a.expert_alignment = static_cast<int>(in.expert_alignment);
  a.rank_prefix_matrix = ptr<int32_t>(rpm);
  a.channel_prefix_matrix = ptr<int32_t>(cpm);
  // With num_worst_tokens nothing waits on the counters (and a pending write could race with the
  // next call's reset): the kernel gets none.
  int32_t* const counts = counters_.host_as<int32_t>();
  if (!worst) {
    for (int i = 0; i <= L; ++i) __atomic_store_n(counts + i, -1, __ATOMIC_RELEASE);
    a.recv_counter = counters_.device_as<int32_t>();
    a.recv_expert_counter = counters_.device_as<int32_t>() + 1;
  }
  cuda_check(ht::launch_notify(a, stream), kWho, "HT notify launch");
  if (worst) {
    out.num_recv = in.num_worst_tokens;
    return out;
  }
  // Wait for the counts (the notify kernel publishes them with a system-scope fence). Ends on a
  // kernel error (a peer that never reached the barrier) or after twice the kernel timeout.
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::nanoseconds(2 * timeout_ns_) + std::chrono::seconds(10);
  for (int spins = 0;; ++spins) {
    bool done = __atomic_load_n(counts, __ATOMIC_ACQUIRE) >= 0;
    for (int i = 1; i <= L && done; ++i) done = __atomic_load_n(counts + i, __ATOMIC_ACQUIRE) >= 0;
    if (done) break;
    check_error();
    if (std::chrono::steady_clock::now() - start > limit)
      throw TimeoutError("anyep HT: rank " + std::to_string(rank_) +
                         ": dispatch's receive counts did not arrive from the GPU (notify kernel not finished; "
                         "a peer missing from the call, or the GPU busy with earlier work)");
    if (spins > 1000) std::this_thread::yield();
  }
  out.num_recv = counts[0];
  out.per_expert.assign(counts + 1, counts + 1 + L);
  return out;
}

void HTBuffer::dispatch(const HTDispatchIn& in, const HTDispatchPlan& p, int64_t num_recv, const TensorRef& rpm,
                        const TensorRef& cpm, const HTDispatchOut& o, cudaStream_t stream) {
  if (destroyed_) throw InvalidArgument("anyep HT: buffer was destroyed");
  const HTDispatchOutSpecs s = ht_dispatch_outputs(p, num_recv, info());
  expect_output(o.recv_x, s.recv_x, "recv_x", device_);
  if (s.recv_x_scales.present) expect_output(o.recv_x_scales, s.recv_x_scales, "recv_x_scales", device_);
  if (s.recv_topk_idx.present) {
    expect_output(o.recv_topk_idx, s.recv_topk_idx, "recv_topk_idx", device_);
    expect_output(o.recv_topk_weights, s.recv_topk_weights, "recv_topk_weights", device_);
  }
  expect_output(o.recv_channel_prefix_matrix, s.recv_channel_prefix_matrix, "recv_channel_prefix_matrix", device_);
  expect_output(o.recv_src_idx, s.recv_src_idx, "recv_src_idx", device_);
  expect_output(o.send_head, s.send_head, "send_head", device_);
  ht::DispatchArgs a;
  a.x = ctx();
  a.g = p.g;
  a.num_tokens = static_cast<int>(p.num_tokens);
  a.num_topk = static_cast<int>(p.num_topk);
  a.num_local_experts = static_cast<int>(p.num_local_experts);
  a.x_bytes = p.x_bytes;
  a.num_scales = static_cast<int>(p.num_scales);
  a.scale_token_stride = static_cast<int>(p.scale_token_stride);
  a.scale_hidden_stride = static_cast<int>(p.scale_hidden_stride);
  a.x_data = ptr<const uint8_t>(in.x);
  a.x_scales = ptr<const uint8_t>(in.x_scales);
  a.topk_idx = ptr<const int64_t>(in.topk_idx);
  a.topk_weights = ptr<const float>(in.topk_weights);
  a.is_token_in_rank = ptr<const bool>(in.is_token_in_rank);
  a.channel_prefix_matrix = ptr<const int32_t>(cpm);
  a.rank_prefix_matrix = ptr<const int32_t>(rpm);
  a.num_recv_capacity = static_cast<int>(num_recv);
  a.worst = in.num_worst_tokens > 0;
  a.recv_x = ptr<uint8_t>(o.recv_x);
  a.recv_scales = ptr<uint8_t>(o.recv_x_scales);
  a.recv_src_idx = ptr<int32_t>(o.recv_src_idx);
  a.recv_topk_idx = ptr<int64_t>(o.recv_topk_idx);
  a.recv_topk_weights = ptr<float>(o.recv_topk_weights);
  a.recv_channel_prefix_matrix = ptr<int32_t>(o.recv_channel_prefix_matrix);
  a.send_head = ptr<int32_t>(o.send_head);
  cuda_check(ht::launch_dispatch(a, stream), kWho, "HT dispatch launch");
}

void HTBuffer::combine(const HTCombineIn& in, const HTCombinePlan& p, const TensorRef& out,
                       const TensorRef& out_weights, cudaStream_t stream) {
  ready();
  expect_output(out, p.out, "combined_x", device_);
  if (p.out_weights.present) expect_output(out_weights, p.out_weights, "combined_topk_weights", device_);
  cuda_check(ht::launch_barrier(ctx(), stream), kWho, "HT barrier launch");
  ht::CombineArgs a;
  a.x = ctx();
  a.g = p.g;
  a.num_recv = static_cast<int>(p.num_recv);
  a.num_tokens = static_cast<int>(p.num_tokens);
  a.hidden = static_cast<int>(p.hidden);
  a.num_topk = static_cast<int>(p.num_topk);
  a.x_data = ptr<const uint16_t>(in.x);
  a.topk_weights = ptr<const float>(in.topk_weights);
  a.bias0 = ptr<const uint16_t>(in.bias0);
  a.bias1 = ptr<const uint16_t>(in.bias1);
  a.rank_prefix_matrix = ptr<const int32_t>(in.rank_prefix_matrix);
  a.recv_channel_prefix_matrix = ptr<const int32_t>(in.recv_channel_prefix_matrix);
  a.send_head = ptr<const int32_t>(in.send_head);
  a.out = ptr<uint16_t>(out);
  a.out_topk_weights = p.out_weights.present ? ptr<float>(out_weights) : nullptr;
  cuda_check(ht::launch_combine(a, stream), kWho, "HT combine launch");
}

void HTBuffer::check_error() const {
  if (!err_) return;
  ErrorRecord* const rec = err_.host_as<ErrorRecord>();
  const uint32_t code = __atomic_load_n(&rec->code, __ATOMIC_ACQUIRE);
  if (code == kErrNone) return;
  const ErrorRecord e = *rec;
  // Bad input found on the device leaves the rings drained (consistent): clear the record, so the
  // error is raised once and the next call runs.
  if (code == ht::kErrBadExpert || code == ht::kErrWorstTooSmall || code == ht::kErrCountsMismatch)
    std::memset(rec, 0, sizeof(ErrorRecord));
  using std::to_string;
  std::string m = "anyep HT: rank " + to_string(e.rank) + ": ";
  switch (code) {
    case ht::kErrBadExpert:
      throw InvalidArgument(m + "get_dispatch_layout: topk_idx holds expert " + to_string(e.expert) + " (token " +
                            to_string(e.value) + "), outside [-1, num_experts); its layout counts skip it");
    case ht::kErrWorstTooSmall:
      throw InvalidArgument(m + "num_worst_tokens=" + to_string(e.expert) + " is too small: this rank received " +
                            to_string(e.value) + "+ tokens (rows past num_worst_tokens were dropped)");
    case ht::kErrCountsMismatch:
      throw InvalidArgument(m + "num_tokens_per_rank disagrees with is_token_in_rank: rank " + to_string(e.peer) +
                            " sent more tokens than the counts allowed (" + to_string(e.expert) +
                            " rows); pass the tensors get_dispatch_layout returned");
    case ht::kErrBarrierTimeout:
      m += "timed out waiting for rank " + to_string(e.peer) +
           " at the high-throughput barrier (it did not make the call)";
      break;
    case ht::kErrRecvTimeout:
      m += "timed out receiving channel " + to_string(e.value) + " from rank " + to_string(e.peer);
      break;
    case ht::kErrSendTimeout:
      m += "timed out sending channel " + to_string(e.value) + " to rank " + to_string(e.peer) +
           " (its receiver stopped taking tokens)";
      break;
    default:
      m += "unknown device error code " + to_string(code);
  }
  m += " (timeout ANYEP_TIMEOUT_S; the high-throughput buffer must be rebuilt)";
  throw TimeoutError(m);
}

}  // namespace anyep::runtime
