#include "runtime/ll/buffer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/cuda_check.h"
#include "common/env.h"
#include "common/error.h"
#include "kernels/preload.h"
#include "runtime/common/ipc_peers.h"
#include "runtime/ll/error.h"

namespace anyep::runtime {
namespace {

void cuda_check(cudaError_t e, const std::string& what) { anyep::cuda_check(e, "anyep LL", what); }

constexpr uint32_t kPeerInfoMagic = 0x414c4c31;  // "ALL1"

}  // namespace

int64_t LowLatencyBuffer::size_hint(int64_t T, int64_t H, int64_t R, int64_t E) {
  const ll::Layout g{T, H, R, E, compact_layout_from_env()};
  if (const char* why = ll::layout_unsupported(g)) throw InvalidArgument(std::string("anyep LL size hint: ") + why);
  return static_cast<int64_t>(g.total_bytes());
}

LowLatencyBuffer::LowLatencyBuffer(int rank, int num_ranks, int64_t num_bytes, int device, const std::string& path,
                                   bool enable_shrink)
    : rank_(rank), num_ranks_(num_ranks), num_bytes_(num_bytes), path_(parse_ll_path(path)) {
  if (num_ranks <= 0 || rank < 0 || rank >= num_ranks)
    throw InvalidArgument("anyep LL: rank " + std::to_string(rank) + " out of range for " + std::to_string(num_ranks) +
                          " ranks");
  if (num_bytes <= 0) throw InvalidArgument("anyep LL: num_rdma_bytes must be positive for low-latency mode");
  if (device < 0) {
    cuda_check(cudaGetDevice(&device_), "cudaGetDevice");
  } else {
    device_ = device;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  }
  cuda_check(preload_kernels(), "load the anyep kernels (kernels/preload.h)");
  int sms = 0;
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_), "SM count");
  // One 1024-thread block per SM: all co-resident (the kernels wait on each other). ANYEP_LL_SMS
  // leaves SMs free for other work (e.g. copies the driver runs as kernels).
  const int64_t want = env::get_count("ANYEP_LL_SMS");
  num_blocks_ = static_cast<int>(std::min<int64_t>(want > 0 ? std::min<int64_t>(want, sms) : sms, ll::kMaxBlocks));
  bool stage_in_host = false;
  if (path_ != LLPath::kAuto && num_ranks > 1) {
    // Every peer goes through the proxy: make its endpoints now to learn where the buffer may live.
    endpoints_ = ProxyLink::make_endpoints(path_, rank, num_ranks, device_, proxy::Proxy::default_threads());
    stage_in_host = !endpoints_[0]->capabilities().gpu_memory;
  }
  if (stage_in_host) {
    // Host-staged: pinned host memory the NIC can reach, mapped into the GPU for the kernels.
    cuda_check(cudaHostAlloc(&host_alloc_, static_cast<size_t>(num_bytes), cudaHostAllocMapped | cudaHostAllocPortable),
               "cudaHostAlloc host-staged LL buffer");
    std::memset(host_alloc_, 0, static_cast<size_t>(num_bytes));
    cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&local_), host_alloc_, 0),
               "map host-staged LL buffer");
  } else {
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&local_), static_cast<size_t>(num_bytes)), "cudaMalloc LL buffer");
    cuda_check(cudaMemset(local_, 0, static_cast<size_t>(num_bytes)), "zero LL buffer");
  }
  ws_ints_ = ll::Workspace::ints(ll::kMaxExperts);
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&ws_), static_cast<size_t>(ws_ints_) * 4), "cudaMalloc LL workspace");
  cuda_check(cudaMemset(ws_, 0, static_cast<size_t>(ws_ints_) * 4), "zero LL workspace");
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&dev_peers_), sizeof(uint8_t*) * num_ranks), "cudaMalloc peer table");
  cuda_check(cudaMemset(dev_peers_, 0, sizeof(uint8_t*) * num_ranks), "zero peer table");
  cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&err_host_), sizeof(ll::ErrorRecord), cudaHostAllocMapped),
             "cudaHostAlloc error record");
  std::memset(err_host_, 0, sizeof(ll::ErrorRecord));
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&err_dev_), err_host_, 0), "map error record");
  if (enable_shrink) {
    const int32_t init[2] = {0, 1};
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&mask_), sizeof(int32_t) * (num_ranks + 2)), "cudaMalloc rank mask");
    cuda_check(cudaMemset(mask_, 0, sizeof(int32_t) * num_ranks), "zero rank mask");
    cuda_check(cudaMemcpy(mask_ + num_ranks, init, sizeof(init), cudaMemcpyHostToDevice), "rank mask constants");
  }
  host_peers_.assign(num_ranks, nullptr);
  opened_.assign(num_ranks, false);
  timeout_ns_ = env::get_duration_ns("ANYEP_TIMEOUT_S");
  check_inputs_ = env::get_bool("ANYEP_LL_CHECK_INPUTS");
  compact_ = compact_layout_from_env();
}

LowLatencyBuffer::~LowLatencyBuffer() {
  try {
    destroy();
  } catch (...) {
    // Destructors must not throw; destroy() called explicitly reports errors.
  }
}

void LowLatencyBuffer::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  proxy_.reset();  // stops the proxy threads before the memory they read goes away
  endpoints_.clear();
  for (int r = 0; r < num_ranks_; ++r)
    if (opened_[r]) cudaIpcCloseMemHandle(host_peers_[r]);
  if (dev_peers_) cudaFree(dev_peers_);
  if (ws_) cudaFree(ws_);
  if (mask_) cudaFree(mask_);
  mask_ = nullptr;
  if (host_alloc_) {
    cudaFreeHost(host_alloc_);
  } else if (local_) {
    cudaFree(local_);
  }
  host_alloc_ = nullptr;
  if (err_host_) cudaFreeHost(err_host_);
  dev_peers_ = nullptr;
  ws_ = nullptr;
  local_ = nullptr;
  err_host_ = err_dev_ = nullptr;
  host_peers_.assign(num_ranks_, nullptr);
  all_direct_ = false;
  connected_ = false;
}

std::vector<uint8_t> LowLatencyBuffer::local_info() const {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  // Host-staged: reached through the proxy only, no IPC handle.
  return make_ipc_record(kPeerInfoMagic, rank_, device_, host_staged() ? nullptr : local_, num_bytes_);
}

void LowLatencyBuffer::connect(const std::vector<std::vector<uint8_t>>& infos, transport::Bootstrap* boot) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  const std::vector<IpcRecord> recs =
      parse_ipc_records(infos, kPeerInfoMagic, num_ranks_, num_bytes_, "anyep LL connect");
  for (int r = 0; r < num_ranks_; ++r) {
    if (r == rank_) {
      host_peers_[r] = local_;
      continue;
    }
    if (path_ != LLPath::kAuto) continue;  // each process its own node: every peer through the proxy
    host_peers_[r] = open_ipc_peer(recs[r], device_, "anyep LL connect");  // null: proxy path
    opened_[r] = host_peers_[r] != nullptr;
  }
  cuda_check(cudaMemcpy(dev_peers_, host_peers_.data(), sizeof(uint8_t*) * num_ranks_, cudaMemcpyHostToDevice),
             "upload peer table");
  all_direct_ = std::all_of(host_peers_.begin(), host_peers_.end(), [](const uint8_t* p) { return p != nullptr; });
  if (boot) connect_proxy(*boot);
  connected_ = true;
}

void LowLatencyBuffer::connect_proxy(transport::Bootstrap& boot) {
  if (boot.size() != static_cast<uint32_t>(num_ranks_) || boot.rank() != static_cast<uint32_t>(rank_))
    throw InvalidArgument("anyep LL connect: bootstrap is rank " + std::to_string(boot.rank()) + " of " +
                          std::to_string(boot.size()) + ", the buffer rank " + std::to_string(rank_) + " of " +
                          std::to_string(num_ranks_));
  bool need = false;
  for (int r = 0; r < num_ranks_; ++r) need = need || host_peers_[r] == nullptr;
  // Collective decision: the proxy's construction is a collective, so either every rank builds
  // one or none does.
  bool any = false;
  for (const auto& v : boot.allgather({static_cast<uint8_t>(need)})) any = any || (!v.empty() && v[0]);
  if (!any) return;
  if (endpoints_.empty())
    endpoints_ = ProxyLink::make_endpoints(path_, rank_, num_ranks_, device_, proxy::Proxy::default_threads());
  if (!host_staged() && !endpoints_[0]->capabilities().gpu_memory)
    throw Unsupported(
        "anyep LL: transport " + endpoints_[0]->capabilities().backend + "/" + endpoints_[0]->capabilities().provider +
        " cannot register GPU memory; set ANYEP_LL_PATH=proxy-libfabric to stage the buffer in pinned host memory");
  proxy_ = std::make_unique<ProxyLink>("LL", num_ranks_, device_, std::move(endpoints_),
                                       host_staged() ? host_alloc_ : local_, static_cast<uint64_t>(num_bytes_),
                                       host_staged() ? transport::MemKind::kHost : transport::MemKind::kCuda,
                                       path_ != LLPath::kAuto ? 1u : 0u, shrink(), boot);
  endpoints_.clear();
}

std::string LowLatencyBuffer::describe_paths() const {
  std::string direct, proxied;
  for (int r = 0; r < num_ranks_; ++r) (host_peers_[r] ? direct : proxied) += (std::to_string(r) + ",");
  std::string out = "path " + std::string(ll_path_name(path_)) + (host_staged() ? " (host-staged buffer)" : "") +
                    (compact_ ? " (compact dispatch layout)" : "");
  if (!direct.empty()) out += "; direct stores to ranks " + direct.substr(0, direct.size() - 1);
  if (!proxied.empty())
    out += "; " + (proxy_ ? "proxy (" + proxy_->describe() + ")" : std::string("no path")) + " to ranks " +
           proxied.substr(0, proxied.size() - 1);
  if (proxy_)
    if (const std::string d = proxy_->dropped_peers(); !d.empty()) out += "; the proxy dropped " + d;
  return out;
}

ll::Layout LowLatencyBuffer::layout_for(const LLShape& s) const {
  return validate_layout(s.max_tokens, s.hidden, s.num_experts, info());
}

ll::Common LowLatencyBuffer::common_base() const {
  ll::Common c;
  c.g.R = num_ranks_;
  c.by_ranks = FastDiv(static_cast<uint32_t>(num_ranks_));
  c.host_mem = host_staged();
  if (proxy_) c.proxy = proxy_->path();
  c.rank = rank_;
  c.num_blocks = num_blocks_;
  c.local = local_;
  c.peers = dev_peers_;
  c.all_direct = all_direct_;
  // Fixed offsets (not E-dependent), like the signals: a shape change never aliases one counter
  // array onto another.
  constexpr int64_t X = ll::kMaxExperts;
  c.ws.send_slot = ws_;
  c.ws.send_done = ws_ + X;
  static_assert(X % 2 == 0, "recv_arrivals (64-bit) starts 8-byte aligned");
  c.ws.recv_arrivals = reinterpret_cast<unsigned long long*>(ws_ + 2 * X);  // 2X ints
  c.ws.blocks_done = ws_ + 4 * X;
  c.ws.combine_epoch = reinterpret_cast<uint32_t*>(ws_ + 4 * X + 8);  // Workspace::kEpochInts
  c.ws.barrier_sent = ws_ + ll::Workspace::reset_ints(X);
  c.ws.barrier_seen = ws_ + ll::Workspace::reset_ints(X) + X;
  c.err = err_dev_;
  c.timeout_ns = timeout_ns_;
  c.mask = mask_;
  return c;
}

ll::Common LowLatencyBuffer::common_for(const LLShape& s, int num_tokens, int num_topk, int buf) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!connected_) throw InvalidArgument("anyep LL: buffer not connected");
  check_error();
  ll::Common c = common_base();
  c.g = layout_for(s);
  if (num_tokens < 0 || num_tokens > s.max_tokens)
    throw InvalidArgument("anyep LL: " + std::to_string(num_tokens) +
                          " tokens exceed num_max_dispatch_tokens_per_rank " + std::to_string(s.max_tokens));
  if (num_topk <= 0 || num_topk > ll::kMaxTopk)
    throw InvalidArgument("anyep LL: num_topk " + std::to_string(num_topk) + " not in [1, " +
                          std::to_string(ll::kMaxTopk) + "]");
  for (int r = 0; r < num_ranks_; ++r)
    if (!host_peers_[r] && !proxy_)
      throw Unsupported("anyep LL: rank " + std::to_string(r) + " is not reachable over NVLink/CUDA IPC from rank " +
                        std::to_string(rank_) + " and this buffer has no proxy (connect() was given no bootstrap)");
  c.num_topk = num_topk;
  c.num_tokens = num_tokens;
  c.buf = buf;
  return c;
}

ll::Common LowLatencyBuffer::next_dispatch_common(const LLShape& s, int num_tokens, int num_topk) {
  ll::Common c = common_for(s, num_tokens, num_topk, dispatch_half_);
  dispatch_half_ ^= 1;
  return c;
}

ll::Common LowLatencyBuffer::next_combine_common(const LLShape& s, int num_tokens, int num_topk) {
  ll::Common c = common_for(s, num_tokens, num_topk, combine_half_);
  combine_half_ ^= 1;
  return c;
}

void LowLatencyBuffer::launch(ll::DispatchArgs a, int phases, cudaStream_t stream) const {
  a.c.phases = phases;
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(ll::launch_dispatch(a, stream), "LL dispatch launch");
}

void LowLatencyBuffer::launch(ll::CombineArgs a, int phases, cudaStream_t stream) const {
  a.c.phases = phases;
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(ll::launch_combine(a, stream), "LL combine launch");
}

void LowLatencyBuffer::clean() {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  // A failed proxy path cannot be cleaned (ProxyLink::check says why): raise its error here
  // rather than zero the counters and let the next call fail with the old message.
  if (proxy_) proxy_->check();
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaDeviceSynchronize(), "synchronize before clean");
  // Signals live in a fixed area at the start of the buffer (ll/layout.h), whatever the shape; the
  // barrier words after them, and the barrier counts of the workspace, only grow.
  const int64_t sig = std::min<int64_t>(num_bytes_, static_cast<int64_t>(ll::Layout::reset_signal_bytes()));
  cuda_check(cudaMemset(local_, 0, static_cast<size_t>(sig)), "clear LL signals");
  // And everything after the signal area: the row flags of combine slots (ll/layout.h) count calls
  // like the epochs reset below, so none may outlive them (a stale one would match a later call).
  const int64_t regions = static_cast<int64_t>(ll::Layout::signal_bytes());
  if (regions < num_bytes_)
    cuda_check(cudaMemset(local_ + regions, 0, static_cast<size_t>(num_bytes_ - regions)), "clear LL regions");
  cuda_check(cudaMemset(ws_, 0, static_cast<size_t>(ll::Workspace::reset_ints(ll::kMaxExperts)) * 4),
             "clear LL workspace");
  cuda_check(cudaDeviceSynchronize(), "synchronize after clean");
  if (proxy_) proxy_->clear_counters();
  std::memset(err_host_, 0, sizeof(ll::ErrorRecord));
  dispatch_half_ = combine_half_ = 0;
}

void LowLatencyBuffer::run_barrier(const char* when) {
  cudaEvent_t done = nullptr;
  cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "create the barrier's event");
  cudaError_t e = ll::launch_barrier(common_base(), nullptr);
  if (e == cudaSuccess) e = cudaEventRecord(done, nullptr);
  // Poll instead of a blocking sync: a proxy thread of the cuda-ipc transport submitting the
  // barrier's signals must not be stalled by this thread (docs/ll.md, "Proxy path"). The kernel's
  // waits are bounded by ANYEP_TIMEOUT_S; the host gives it that twice, plus slack.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(2 * timeout_ns_) + std::chrono::seconds(30);
  while (e == cudaSuccess) {
    e = cudaEventQuery(done);
    if (e != cudaErrorNotReady) break;  // done (cudaSuccess) or a real error
    e = cudaSuccess;                    // not yet: poll again
    if (std::chrono::steady_clock::now() > deadline) {
      cudaEventDestroy(done);
      throw TimeoutError(std::string("anyep LL: rank ") + std::to_string(rank_) + ": the clean barrier " + when +
                         " did not finish in twice ANYEP_TIMEOUT_S (a stalled GPU or proxy)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  cudaEventDestroy(done);
  cuda_check(e, std::string("clean barrier ") + when);
}

void LowLatencyBuffer::clean_elastic() {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!connected_) throw InvalidArgument("anyep LL: buffer not connected");
  if (!mask_) throw InvalidArgument("anyep LL: the elastic clean needs a Buffer built with enable_shrink=True");
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaDeviceSynchronize(), "synchronize before clean");  // this rank's kernels are done
  run_barrier("before clean");  // every live peer's kernels are done: nothing writes here any more
  clean();
  run_barrier("after clean");  // no peer sends into a buffer that is not clean yet
  check_error();               // what the second barrier reported (clean cleared the record)
}

void LowLatencyBuffer::set_mask(int rank, bool masked, cudaStream_t stream) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!mask_) throw InvalidArgument("anyep LL: rank masking needs a Buffer built with enable_shrink=True");
  if (rank < 0 || rank >= num_ranks_)
    throw InvalidArgument("anyep LL: rank " + std::to_string(rank) + " to mask is outside [0, " +
                          std::to_string(num_ranks_) + ")");
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaMemcpyAsync(mask_ + rank, mask_ + num_ranks_ + (masked ? 1 : 0), sizeof(int32_t),
                             cudaMemcpyDeviceToDevice, stream),
             "update rank mask");
}

void LowLatencyBuffer::copy_mask(int32_t* dst, cudaStream_t stream) const {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!mask_) throw InvalidArgument("anyep LL: rank masking needs a Buffer built with enable_shrink=True");
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaMemcpyAsync(dst, mask_, sizeof(int32_t) * num_ranks_, cudaMemcpyDeviceToDevice, stream),
             "query rank mask");
}

void LowLatencyBuffer::clear_mask(cudaStream_t stream) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!mask_) throw InvalidArgument("anyep LL: rank masking needs a Buffer built with enable_shrink=True");
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaMemsetAsync(mask_, 0, sizeof(int32_t) * num_ranks_, stream), "clean rank mask");
}

void LowLatencyBuffer::check_error() const {
  if (proxy_) proxy_->check();  // a rejected command or a proxy timeout names more than the kernel can
  if (!err_host_) return;
  const uint32_t code = __atomic_load_n(&err_host_->code, __ATOMIC_ACQUIRE);
  if (code == ll::kErrNone) return;
  raise_device_error(code, *err_host_);  // runtime/ll/error.h: the message names the peer
}

}  // namespace anyep::runtime
