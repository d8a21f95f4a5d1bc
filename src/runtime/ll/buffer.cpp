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

constexpr const char* kWho = "anyep LL";  // what cuda_check's messages start with

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
    cuda_check(cudaGetDevice(&device_), kWho, "cudaGetDevice");
  } else {
    device_ = device;
    cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  }
  cuda_check(preload_kernels(), kWho, "load the anyep kernels (kernels/preload.h)");
  int sms = 0;
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_), kWho, "SM count");
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
    staged_ = MappedHostRegion(static_cast<size_t>(num_bytes), "anyep LL host-staged buffer", cudaHostAllocPortable);
    local_ = staged_.device();
  } else {
    buffer_ = DeviceRegion(static_cast<size_t>(num_bytes), "anyep LL buffer");
    local_ = buffer_.data();
  }
  ws_ = DeviceRegion(static_cast<size_t>(ll::Workspace::ints(ll::kMaxExperts)) * 4, "anyep LL workspace");
  err_ = MappedHostRegion(sizeof(ll::ErrorRecord), "anyep LL error record");
  if (enable_shrink) {
    const int32_t init[2] = {0, 1};
    mask_ = DeviceRegion(sizeof(int32_t) * (num_ranks + 2), "anyep LL rank mask");
    cuda_check(cudaMemcpy(mask_.as<int32_t>() + num_ranks, init, sizeof(init), cudaMemcpyHostToDevice), kWho,
               "rank mask constants");
  }
  peers_ = IpcPeers(num_ranks, "anyep LL peer table");
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
  cudaDeviceSynchronize();  // no kernel of this rank still uses the memory below
  proxy_.reset();           // stops the proxy threads before the memory they read goes away
  endpoints_.clear();
  peers_.close();  // the peers' buffers are unmapped before this one is freed
  buffer_.reset();
  staged_.reset();
  local_ = nullptr;
  ws_.reset();
  err_.reset();
  mask_.reset();
  all_direct_ = false;
  connected_ = false;
}

std::vector<uint8_t> LowLatencyBuffer::local_info() const {
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  // Host-staged: reached through the proxy only, no IPC handle.
  return make_ipc_record(kPeerInfoMagic, rank_, device_, host_staged() ? nullptr : local_, num_bytes_);
}

void LowLatencyBuffer::connect(const std::vector<std::vector<uint8_t>>& infos, transport::Bootstrap* boot) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  const std::vector<IpcRecord> recs =
      parse_ipc_records(infos, kPeerInfoMagic, num_ranks_, num_bytes_, "anyep LL connect");
  // A proxy path treats each process as its own node: every peer through the proxy. Else the
  // peers with no direct path (null entries) go through the proxy.
  peers_.open(recs, rank_, local_, device_, path_ == LLPath::kAuto, "anyep LL connect");
  all_direct_ = peers_.first_unreachable() < 0;
  if (boot) connect_proxy(*boot);
  // Checked here once, not on every call: a rank no path reaches.
  unreachable_ = proxy_ ? -1 : peers_.first_unreachable();
  connected_ = true;
}

void LowLatencyBuffer::connect_proxy(transport::Bootstrap& boot) {
  if (boot.size() != static_cast<uint32_t>(num_ranks_) || boot.rank() != static_cast<uint32_t>(rank_))
    throw InvalidArgument("anyep LL connect: bootstrap is rank " + std::to_string(boot.rank()) + " of " +
                          std::to_string(boot.size()) + ", the buffer rank " + std::to_string(rank_) + " of " +
                          std::to_string(num_ranks_));
  const bool need = peers_.first_unreachable() >= 0;
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
                                       host_staged() ? staged_.host() : local_, static_cast<uint64_t>(num_bytes_),
                                       host_staged() ? transport::MemKind::kHost : transport::MemKind::kCuda,
                                       path_ != LLPath::kAuto ? 1u : 0u, shrink(), boot);
  endpoints_.clear();
}

std::string LowLatencyBuffer::describe_paths() const {
  std::string direct, proxied;
  for (int r = 0; r < peers_.size(); ++r) (peers_[r] ? direct : proxied) += (std::to_string(r) + ",");
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
  c.peers = peers_.device_table();
  c.all_direct = all_direct_;
  // Fixed offsets (not E-dependent), like the signals: a shape change never aliases one counter
  // array onto another.
  constexpr int64_t X = ll::kMaxExperts;
  int32_t* const ws = ws_.as<int32_t>();
  c.ws.send_slot = ws;
  c.ws.send_done = ws + X;
  static_assert(X % 2 == 0, "recv_arrivals (64-bit) starts 8-byte aligned");
  c.ws.recv_arrivals = reinterpret_cast<unsigned long long*>(ws + 2 * X);  // 2X ints
  c.ws.blocks_done = ws + 4 * X;
  c.ws.combine_epoch = reinterpret_cast<uint32_t*>(ws + 4 * X + 8);  // Workspace::kEpochInts
  c.ws.barrier_sent = ws + ll::Workspace::reset_ints(X);
  c.ws.barrier_seen = ws + ll::Workspace::reset_ints(X) + X;
  c.err = err_.device_as<ll::ErrorRecord>();
  c.timeout_ns = timeout_ns_;
  c.mask = mask_.as<int32_t>();
  return c;
}

// The buffer's state, not the call's arguments (runtime/ll/validate.h checks those).
ll::Common LowLatencyBuffer::common_for(const ll::Layout& g, int64_t num_tokens, int64_t num_topk, int buf) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!connected_) throw InvalidArgument("anyep LL: buffer not connected");
  check_error();
  if (unreachable_ >= 0)
    throw Unsupported("anyep LL: rank " + std::to_string(unreachable_) +
                      " is not reachable over NVLink/CUDA IPC from rank " + std::to_string(rank_) +
                      " and this buffer has no proxy (connect() was given no bootstrap)");
  ll::Common c = common_base();
  c.g = g;
  c.num_topk = static_cast<int>(num_topk);
  c.num_tokens = static_cast<int>(num_tokens);
  c.buf = buf;
  return c;
}

ll::Common LowLatencyBuffer::next_dispatch_common(const LLShape& s, int num_tokens, int num_topk) {
  const ll::Layout g = layout_for(s);
  validate_counts(num_tokens, num_topk, s.max_tokens);
  ll::Common c = common_for(g, num_tokens, num_topk, dispatch_half_);
  dispatch_half_ ^= 1;
  return c;
}

ll::Common LowLatencyBuffer::next_combine_common(const LLShape& s, int num_tokens, int num_topk) {
  const ll::Layout g = layout_for(s);
  validate_counts(num_tokens, num_topk, s.max_tokens);
  ll::Common c = common_for(g, num_tokens, num_topk, combine_half_);
  combine_half_ ^= 1;
  return c;
}

ll::Common LowLatencyBuffer::next_dispatch_common(const LLDispatchPlan& p) {
  ll::Common c = common_for(p.g, p.num_tokens, p.num_topk, dispatch_half_);
  dispatch_half_ ^= 1;
  return c;
}

ll::Common LowLatencyBuffer::next_combine_common(const LLCombinePlan& p) {
  ll::Common c = common_for(p.g, p.num_tokens, p.num_topk, combine_half_);
  combine_half_ ^= 1;
  return c;
}

void LowLatencyBuffer::launch(ll::DispatchArgs a, int phases, cudaStream_t stream) const {
  a.c.phases = phases;
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(ll::launch_dispatch(a, stream), kWho, "LL dispatch launch");
}

void LowLatencyBuffer::launch(ll::CombineArgs a, int phases, cudaStream_t stream) const {
  a.c.phases = phases;
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(ll::launch_combine(a, stream), kWho, "LL combine launch");
}

void LowLatencyBuffer::clean() {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  // A failed proxy path cannot be cleaned (ProxyLink::check says why): raise its error here
  // rather than zero the counters and let the next call fail with the old message.
  if (proxy_) proxy_->check();
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(cudaDeviceSynchronize(), kWho, "synchronize before clean");
  // Signals live in a fixed area at the start of the buffer (ll/layout.h), whatever the shape; the
  // barrier words after them, and the barrier counts of the workspace, only grow.
  const int64_t sig = std::min<int64_t>(num_bytes_, static_cast<int64_t>(ll::Layout::reset_signal_bytes()));
  cuda_check(cudaMemset(local_, 0, static_cast<size_t>(sig)), kWho, "clear LL signals");
  // And everything after the signal area: the row flags of combine slots (ll/layout.h) count calls
  // like the epochs reset below, so none may outlive them (a stale one would match a later call).
  const int64_t regions = static_cast<int64_t>(ll::Layout::signal_bytes());
  if (regions < num_bytes_)
    cuda_check(cudaMemset(local_ + regions, 0, static_cast<size_t>(num_bytes_ - regions)), kWho, "clear LL regions");
  ws_.zero(static_cast<size_t>(ll::Workspace::reset_ints(ll::kMaxExperts)) * 4);
  cuda_check(cudaDeviceSynchronize(), kWho, "synchronize after clean");
  if (proxy_) proxy_->clear_counters();
  std::memset(err_.host(), 0, sizeof(ll::ErrorRecord));
  dispatch_half_ = combine_half_ = 0;
}

void LowLatencyBuffer::run_barrier(const char* when) {
  cudaEvent_t done = nullptr;
  cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), kWho, "create the barrier's event");
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
  cuda_check(e, kWho, std::string("clean barrier ") + when);
}

void LowLatencyBuffer::clean_elastic() {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!connected_) throw InvalidArgument("anyep LL: buffer not connected");
  if (!mask_) throw InvalidArgument("anyep LL: the elastic clean needs a Buffer built with enable_shrink=True");
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(cudaDeviceSynchronize(), kWho, "synchronize before clean");  // this rank's kernels are done
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
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  int32_t* const mask = mask_.as<int32_t>();
  cuda_check(cudaMemcpyAsync(mask + rank, mask + num_ranks_ + (masked ? 1 : 0), sizeof(int32_t),
                             cudaMemcpyDeviceToDevice, stream),
             kWho, "update rank mask");
}

void LowLatencyBuffer::copy_mask(int32_t* dst, cudaStream_t stream) const {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!mask_) throw InvalidArgument("anyep LL: rank masking needs a Buffer built with enable_shrink=True");
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(cudaMemcpyAsync(dst, mask_.data(), sizeof(int32_t) * num_ranks_, cudaMemcpyDeviceToDevice, stream), kWho,
             "query rank mask");
}

void LowLatencyBuffer::clear_mask(cudaStream_t stream) {
  if (destroyed_) throw InvalidArgument("anyep LL: buffer was destroyed");
  if (!mask_) throw InvalidArgument("anyep LL: rank masking needs a Buffer built with enable_shrink=True");
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(cudaMemsetAsync(mask_.data(), 0, sizeof(int32_t) * num_ranks_, stream), kWho, "clean rank mask");
}

void LowLatencyBuffer::check_error() const {
  if (proxy_) proxy_->check();  // a rejected command or a proxy timeout names more than the kernel can
  if (!err_) return;
  const ll::ErrorRecord* rec = err_.host_as<ll::ErrorRecord>();
  const uint32_t code = __atomic_load_n(&rec->code, __ATOMIC_ACQUIRE);
  if (code == ll::kErrNone) return;
  raise_device_error(code, *rec);  // runtime/ll/error.h: the message names the peer
}

}  // namespace anyep::runtime
