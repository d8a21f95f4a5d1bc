#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/gpu_runtime.h"
#include "transport/cuda_ipc/copy_tracker.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"
#include "transport/cuda_ipc/imm_inbox.h"
#include "transport/region_table.h"

namespace anyep::transport::cuda_ipc {

namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes, "WireRegion::ipc_handle must hold a cudaIpcMemHandle_t");

std::string cuda_msg(const char* call, cudaError_t e) {
  return std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}
#define CIPC_CUDA_THROW(call, ctx)                                                         \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) throw CudaError(std::string(ctx) + ": " + cuda_msg(#call, e_)); \
  } while (0)

// Random per process: two endpoints with the same token share an address space, where CUDA IPC
// handles cannot be opened (and are not needed: the exporter's pointer is valid as it is).
uint64_t process_token() {
  static const uint64_t token = [] {
    std::random_device rd;
    uint64_t t = (uint64_t{rd()} << 32) ^ rd() ^ (uint64_t(getpid()) << 16);
    return t ? t : 1;
  }();
  return token;
}

std::string unique_inbox_name(uint32_t rank) {
  static std::atomic<uint32_t> seq{0};
  std::random_device rd;
  char buf[kShmNameBytes];
  std::snprintf(buf, sizeof buf, "/anyep-cipc-%d-r%u-%u-%08x", static_cast<int>(getpid()), rank, seq.fetch_add(1),
                static_cast<unsigned>(rd()));
  return buf;
}

using Tracker = CopyTracker<cudaEvent_t>;

// The copy streams of every cuda-ipc endpoint of this process on `device` (the first `n`; created
// on first use, kept for the life of the process). Shared because each stream takes one of the
// device's hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default): past that, streams
// share a queue, and a copy queued behind a kernel that spins until that copy lands never starts.
// One endpoint per proxy thread with streams of its own made 4 x 2 copy streams per process; an LL
// world of 2 processes on one H200 then held its signals until the 5 s timeout, and passed with 2
// proxy threads or CUDA_DEVICE_MAX_CONNECTIONS=32 (2026-11-26, docs/transport.md).
std::vector<cudaStream_t> shared_copy_streams(int device, uint32_t n, const std::string& where) {
  static std::mutex mu;
  static std::vector<std::vector<cudaStream_t>> pools;
  std::lock_guard<std::mutex> lock(mu);
  if (pools.size() <= static_cast<size_t>(device)) pools.resize(static_cast<size_t>(device) + 1);
  auto& pool = pools[static_cast<size_t>(device)];
  while (pool.size() < n) {
    cudaStream_t s = nullptr;
    CIPC_CUDA_THROW(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), where);
    pool.push_back(s);
  }
  return std::vector<cudaStream_t>(pool.begin(), pool.begin() + n);
}

// Copies of one issue_pending() in one runtime call where the runtime has it. CUDA 12.8 added
// cudaMemcpyBatchAsync (with a failure index, dropped in 13.0). Copies within a batch run in any
// order, which this transport never promised anyway (ordered_writes = false).
cudaError_t memcpy_batch(void** dsts, void** srcs, size_t* sizes, size_t n, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  cudaMemcpyAttributes attr{};
  // Stream order: the sources were written by kernels the proxy learnt of through the rings; the
  // copy must not read them before the stream gets there. Overlap with compute: the LL kernels
  // keep running (and spinning) while these copies go, so the driver should not take SMs for them.
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t first = 0;
#if CUDART_VERSION >= 13000
  return cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &first, 1, stream);
#else
  size_t fail_idx = 0;
  return cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &first, 1, &fail_idx, stream);
#endif
#else
  (void)dsts, (void)srcs, (void)sizes, (void)n, (void)stream;
  return cudaErrorNotSupported;
#endif
}

class CudaIpcTransport final : public Transport {
 public:
  explicit CudaIpcTransport(const CudaIpcConfig& o) : opt_(o), track_(o.num_streams, o.num_ranks, o.max_outstanding) {
    if (o.num_ranks == 0 || o.rank >= o.num_ranks)
      throw InvalidArgument("cuda-ipc transport: rank " + std::to_string(o.rank) + " out of range (num_ranks " +
                            std::to_string(o.num_ranks) + ")");
    if (o.max_outstanding == 0 || o.num_streams == 0)
      throw InvalidArgument("cuda-ipc transport: max_outstanding and num_streams must be >= 1");
    int ndev = 0;
    CIPC_CUDA_THROW(cudaGetDeviceCount(&ndev), where());
    if (o.device < 0 || o.device >= ndev)
      throw InvalidArgument(where() + ": device " + std::to_string(o.device) + " does not exist (" +
                            std::to_string(ndev) + " visible)");
    caps_.backend = "cuda-ipc";
    caps_.provider = "cuda-ipc";
    caps_.ordered_writes = false;  // several copy streams; completions and immediates come in any order
    caps_.imm_bytes = 4;
    caps_.native_atomics = false;
    caps_.atomics_note = "cuda-ipc has no remote atomics (copy engines and an immediate inbox only)";
    caps_.gpu_memory = true;
    caps_.max_write_bytes = 1ull << 40;
    caps_.num_nics = 1;
    inbox_ = ImmInbox::create(unique_inbox_name(o.rank), o.num_ranks, o.imm_slots);  // checks imm_slots
    CIPC_CUDA_THROW(cudaSetDevice(o.device), where());
    streams_ = shared_copy_streams(o.device, o.num_streams, where());
    ipc_mappings_.resize(o.num_ranks);
    // At most max_outstanding copies wait to be issued (the tracker reserved its queue): the hot
    // path never allocates for them.
    batch_dsts_.resize(o.max_outstanding);
    batch_srcs_.resize(o.max_outstanding);
    batch_sizes_.resize(o.max_outstanding);
    batch_api_ = o.batch_copies;
  }

  ~CudaIpcTransport() override {
    cudaSetDevice(opt_.device);
    issue_pending();  // accepted copies still go (and get their event): they are tracked below
    // Bounded wait for copies still in flight: the memory they touch may be freed right after.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.teardown_timeout_s);
    bool drained = false;
    while (!drained) {
      drained = true;
      track_.for_each_event([&](cudaEvent_t e) { drained = drained && cudaEventQuery(e) != cudaErrorNotReady; });
      if (drained || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const size_t lost = track_.undelivered();
    if (!drained)
      std::fprintf(stderr, "anyep: %s: copies still in flight after %.1f s at teardown; IPC mappings are leaked\n",
                   where().c_str(), opt_.teardown_timeout_s);
    if (lost)
      std::fprintf(stderr, "anyep: %s: destroyed with %zu writes/immediates not yet delivered\n", where().c_str(),
                   lost);
    track_.for_each_event([&](cudaEvent_t e) { free_events_.push_back(e); });
    // streams_ belong to the process's shared pool (shared_copy_streams): not destroyed here.
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (drained)
      for (auto& peer : ipc_mappings_)
        for (void* m : peer)
          if (m) cudaIpcCloseMemHandle(m);
    // inbox_ unlinks its segment; peer_inboxes_ unmap theirs.
  }

  const Capabilities& capabilities() const override { return caps_; }
  uint32_t rank() const override { return opt_.rank; }
  uint32_t num_ranks() const override { return opt_.num_ranks; }

  MrId register_memory(void* base, size_t length, MemKind kind) override {
    if (!base || !length)
      throw InvalidArgument(where() + ": register_memory needs a non-null base and length > 0 (got length " +
                            std::to_string(length) + ")");
    if (kind == MemKind::kHost) return register_host(base, length);
    CIPC_CUDA_THROW(cudaSetDevice(opt_.device), where());
    cudaPointerAttributes attr{};
    cudaError_t e = cudaPointerGetAttributes(&attr, base);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw InvalidArgument(where() + ": register_memory: " + cuda_msg("cudaPointerGetAttributes", e));
    }
    if (gpu::memory_type(attr) != cudaMemoryTypeDevice)
      throw InvalidArgument(where() + ": register_memory: pointer is not cudaMalloc'd device memory (memory type " +
                            std::to_string(gpu::memory_type(attr)) + "); MemKind::kCuda needs device memory");
    if (attr.device != opt_.device)
      throw InvalidArgument(where() + ": register_memory: memory lives on device " + std::to_string(attr.device) +
                            ", this endpoint drives device " + std::to_string(opt_.device));
    uint64_t alloc_base = 0;
    size_t alloc_size = 0;
    if (const std::string err = gpu::allocation_range(base, &alloc_base, &alloc_size); !err.empty())
      throw CudaError(where() + ": " + err);
    uint64_t offset = reinterpret_cast<uint64_t>(base) - alloc_base;
    if (offset + length > alloc_size)
      throw InvalidArgument(where() + ": register_memory: [base, base+" + std::to_string(length) +
                            ") runs past the end of its allocation (" + std::to_string(alloc_size - offset) +
                            " bytes left)");
    WireRegion wire{};
    wire.magic = kRegionMagic;
    wire.version = kWireVersion;
    wire.device = static_cast<uint16_t>(opt_.device);
    wire.process_token = process_token();
    wire.alloc_base = alloc_base;
    wire.offset = offset;
    wire.length = length;
    cudaIpcMemHandle_t h{};
    e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(alloc_base));
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw CudaError(where() + ": register_memory: " + cuda_msg("cudaIpcGetMemHandle", e) +
                      " (memory from cudaMallocAsync pools or cuMemCreate cannot be shared through legacy CUDA IPC)");
    }
    std::memcpy(wire.ipc_handle, &h, sizeof h);
    exported_.push_back(wire);
    local_host_.push_back(false);
    return regions_.add_local(reinterpret_cast<uint64_t>(base), length);
  }

  // Host memory: no CUDA IPC handle; peers of other processes write it with process_vm_writev.
  MrId register_host(void* base, size_t length) {
    // Peers write host regions with process_vm_writev, which Yama (ptrace_scope 1) allows only to
    // a declared tracer: declared in connect(), once the peers' pids are known (before any peer
    // can import this region), or here for a region registered after connect().
    host_exported_ = true;
    if (connected_) allow_peer_writers();
    WireRegion wire{};
    wire.magic = kRegionMagic;
    wire.version = kWireVersion;
    wire.device = kHostRegionDevice;
    wire.process_token = process_token();
    wire.alloc_base = reinterpret_cast<uint64_t>(base);
    wire.offset = 0;
    wire.length = length;
    exported_.push_back(wire);
    local_host_.push_back(true);
    return regions_.add_local(reinterpret_cast<uint64_t>(base), length);
  }

  std::vector<uint8_t> export_mr(MrId id) const override {
    if (id >= exported_.size()) throw InvalidArgument(where() + ": export_mr of unknown region " + std::to_string(id));
    std::vector<uint8_t> d(sizeof(WireRegion));
    std::memcpy(d.data(), &exported_[id], sizeof(WireRegion));
    return d;
  }

  std::vector<uint8_t> local_address() const override {
    WireAddress a{};
    a.magic = kAddressMagic;
    a.version = kWireVersion;
    a.device = static_cast<uint16_t>(opt_.device);
    a.rank = opt_.rank;
    a.num_ranks = opt_.num_ranks;
    a.process_token = process_token();
    a.pid = static_cast<uint32_t>(getpid());
    a.inbox_slots = opt_.imm_slots;
    std::snprintf(a.inbox_name, sizeof a.inbox_name, "%s", inbox_.name().c_str());
    std::vector<uint8_t> v(sizeof a);
    std::memcpy(v.data(), &a, sizeof a);
    return v;
  }

  void connect(const std::vector<std::vector<uint8_t>>& addresses) override {
    if (connected_) throw InvalidArgument(where() + ": connect called twice");
    if (addresses.size() != opt_.num_ranks)
      throw InvalidArgument(where() + ": connect got " + std::to_string(addresses.size()) + " addresses for " +
                            std::to_string(opt_.num_ranks) + " ranks");
    peers_.resize(opt_.num_ranks);
    for (uint32_t r = 0; r < opt_.num_ranks; ++r) peers_[r] = parse_address(addresses[r], r, opt_.num_ranks, where());
    if (std::strcmp(peers_[opt_.rank].inbox_name, inbox_.name().c_str()) != 0)
      throw InvalidArgument(where() + ": addresses[" + std::to_string(opt_.rank) +
                            "] is not this endpoint's own address");
    peer_inboxes_.resize(opt_.num_ranks);
    outbox_.assign(opt_.num_ranks, nullptr);
    for (uint32_t r = 0; r < opt_.num_ranks; ++r) {
      if (r == opt_.rank) {
        outbox_[r] = &inbox_;
        continue;
      }
      try {
        peer_inboxes_[r] = ImmInbox::attach(peers_[r].inbox_name, opt_.num_ranks, peers_[r].inbox_slots);
      } catch (const Error& e) {
        throw TransportError(where() + ": cannot reach rank " + std::to_string(r) + " (pid " +
                             std::to_string(peers_[r].pid) + "): " + e.what());
      }
      outbox_[r] = &peer_inboxes_[r];
    }
    connected_ = true;
    if (host_exported_) allow_peer_writers();
  }

  // Declares the peer processes as tracers (Yama ptrace_scope 1) so that their process_vm_writev
  // into this process's host regions is allowed. PR_SET_PTRACER holds a single pid: one peer
  // process is named exactly; with several, PR_SET_PTRACER_ANY is the only value that admits them
  // all (docs/transport.md, "cuda-ipc and Yama"). Without Yama the call fails and nothing is
  // needed; process_vm_writev still requires the same user either way.
  void allow_peer_writers() {
    std::vector<uint32_t> pids;
    for (uint32_t r = 0; r < peers_.size(); ++r)
      if (r != opt_.rank && peers_[r].process_token != process_token() &&
          std::find(pids.begin(), pids.end(), peers_[r].pid) == pids.end())
        pids.push_back(peers_[r].pid);
    if (pids.empty()) return;
    // Process-wide: endpoints of another world in this process may have named another pid; then
    // only ANY keeps both working, and ANY is never narrowed again.
    static std::mutex mu;
    static unsigned long declared = 0;  // 0: nothing declared yet
    std::lock_guard<std::mutex> lock(mu);
    unsigned long want = pids.size() == 1 ? static_cast<unsigned long>(pids[0]) : PR_SET_PTRACER_ANY;
    if (declared != 0 && declared != want) want = PR_SET_PTRACER_ANY;
    if (want == declared) return;
    prctl(PR_SET_PTRACER, want, 0, 0, 0);
    declared = want;
  }

  void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) override {
    if (peer >= opt_.num_ranks)
      throw InvalidArgument(where() + ": import_mr from unknown peer " + std::to_string(peer) + " (num_ranks " +
                            std::to_string(opt_.num_ranks) + ")");
    regions_.check_import(peer, remote_id, where());  // before the per-peer vectors grow to it
    const WireRegion w = parse_region(desc, peer, remote_id, where());
    if (connected_ && w.process_token != peers_[peer].process_token)
      throw InvalidArgument(where() + ": region " + std::to_string(remote_id) +
                            " was exported by another process than rank " + std::to_string(peer));
    CIPC_CUDA_THROW(cudaSetDevice(opt_.device), where());
    uint8_t* ptr = nullptr;   // region start, valid in this process
    void* mapping = nullptr;  // what to cudaIpcCloseMemHandle (null: same process)
    auto& cma = remote_cma_[peer];
    if (cma.size() <= remote_id) cma.resize(size_t{remote_id} + 1, false);
    cma[remote_id] = false;
    if (w.device == kHostRegionDevice) {
      // Host memory: the exporter's address; in another process it is reached through its pid.
      ptr = reinterpret_cast<uint8_t*>(w.alloc_base + w.offset);
      cma[remote_id] = w.process_token != process_token();
    } else if (w.process_token == process_token()) {
      // Same address space: the exporter's pointer is ours too (UVA); peer access if on another GPU.
      if (w.device != opt_.device) enable_peer_access(w.device);
      ptr = reinterpret_cast<uint8_t*>(w.alloc_base + w.offset);
    } else {
      cudaIpcMemHandle_t h;
      std::memcpy(&h, w.ipc_handle, sizeof h);
      void* p = nullptr;
      // The driver reference-counts repeated opens of one allocation; each is closed once.
      cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(where() + ": import_mr of region " + std::to_string(remote_id) + " of rank " +
                        std::to_string(peer) + " (device " + std::to_string(w.device) +
                        "): " + cuda_msg("cudaIpcOpenMemHandle", e));
      }
      mapping = p;
      ptr = static_cast<uint8_t*>(p) + w.offset;
    }
    auto& v = ipc_mappings_[peer];
    if (v.size() <= remote_id) v.resize(size_t{remote_id} + 1, nullptr);
    if (v[remote_id]) cudaIpcCloseMemHandle(v[remote_id]);  // a re-import replaces the old mapping
    v[remote_id] = mapping;
    regions_.set_remote(peer, remote_id, reinterpret_cast<uint64_t>(ptr), w.length);
  }

  int post_write(const WriteDesc& w) override {
    size_t posted = 0;
    return post_writes(&w, 1, &posted);
  }

  // GPU copies are only queued here (no runtime call): poll() issues everything queued since the
  // last poll with one batch call and one event (issue_pending), so a proxy that posts many small
  // writes per loop iteration pays a few runtime calls per iteration, not several per write. A
  // queue of kIssueAt copies is issued at once, so a caller that posts much between polls still
  // keeps the copy engine busy. Host-memory targets of other processes are written synchronously.
  int post_writes(const WriteDesc* w, size_t n, size_t* posted) override {
    *posted = 0;
    int rc = 0;
    for (; *posted < n; ++*posted) {
      const WriteDesc& d = w[*posted];
      if ((rc = check_write(d))) break;
      if (outstanding_ >= opt_.max_outstanding) {
        rc = fail(-EAGAIN, kFullMsg);
        break;
      }
      CopyOp op{d.context, d.dst_rank, d.imm, d.has_imm};
      if (d.length == 0) {  // nothing to copy: the data is trivially in place
        ++outstanding_;
        finish_copy(op);
        continue;
      }
      if (d.remote_mr < remote_cma_[d.dst_rank].size() && remote_cma_[d.dst_rank][d.remote_mr]) {
        // Host memory of another process: a synchronous cross-memory write, then the immediate.
        if ((rc = write_cma(d))) break;
        ++outstanding_;
        finish_copy(op);
        continue;
      }
      // check_write vouched for both regions; their bases are addresses valid in this process.
      ++outstanding_;  // <= max_outstanding, the tracker's queue capacity: queue() cannot refuse
      track_.queue(reinterpret_cast<void*>(regions_.remote(d.dst_rank, d.remote_mr)->base + d.remote_offset),
                   reinterpret_cast<void*>(regions_.local(d.local_mr)->base + d.local_offset), d.length, op);
    }
    // Not returned here: the writes counted in *posted were accepted. A copy that cannot be issued
    // completes with -EIO (no immediate) and the next poll() returns the error.
    if (track_.queued().size() >= kIssueAt && issue_pending()) issue_error_ = true;
    return rc;
  }

  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    if (int rc = check_peer(dst_rank)) return rc;
    if (outstanding_ >= opt_.max_outstanding) return fail(-EAGAIN, kFullMsg);
    ++outstanding_;
    finish_copy(CopyOp{context, dst_rank, imm, true});
    return 0;
  }

  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    *n_comps = 0;
    *n_imms = 0;
    int rc = issue_pending();
    if (issue_error_) {  // an issue inside post_writes failed (last_error() says how)
      issue_error_ = false;
      rc = rc ? rc : -EIO;
    }
    // No runtime call at all while nothing is in flight (idle proxy threads poll constantly).
    if (track_.fences_in_flight()) {
      if (const int drc = ensure_device())
        rc = rc ? rc : drc;
      else
        reap_copies();
    }
    track_.flush_all_imms(push_imm());
    while (*n_comps < max_comps && track_.take(&comps[*n_comps])) {
      ++*n_comps;
      --outstanding_;
    }
    *n_imms = inbox_.drain(imms, max_imms);
    return rc;
  }

  std::string last_error() const override { return last_error_; }

 private:
  // Backpressure is routine: its message is a constant, so -EAGAIN costs no allocation.
  static constexpr const char* kFullMsg = "max_outstanding operations in flight; poll() and retry";
  // post_writes issues the queue itself once it holds this many copies.
  static constexpr size_t kIssueAt = 128;
  std::string where() const {
    return "cuda-ipc transport (rank " + std::to_string(opt_.rank) + ", device " + std::to_string(opt_.device) + ")";
  }
  int fail(int rc, std::string_view msg) {
    last_error_.assign(where_).append(": ").append(msg);
    return rc;
  }
  int ensure_device() {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == opt_.device) return 0;
    cudaError_t e = cudaSetDevice(opt_.device);
    return e == cudaSuccess ? 0 : fail(-EIO, cuda_msg("cudaSetDevice", e));
  }
  void enable_peer_access(int peer_device) {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, opt_.device, peer_device) == cudaSuccess && can) {
      cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    }  // without peer access cudaMemcpyAsync still works (staged by the driver), only slower
  }

  int write_cma(const WriteDesc& d) {
    if (!local_host_[d.local_mr])
      return fail(-EINVAL, "post_write to rank " + std::to_string(d.dst_rank) +
                               ": a write into another process's host memory must come from host memory");
    iovec local{reinterpret_cast<void*>(regions_.local(d.local_mr)->base + d.local_offset), d.length};
    iovec remote{reinterpret_cast<void*>(regions_.remote(d.dst_rank, d.remote_mr)->base + d.remote_offset), d.length};
    const ssize_t n = process_vm_writev(static_cast<pid_t>(peers_[d.dst_rank].pid), &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(d.length)) return 0;
    const int err = n < 0 ? errno : EIO;
    return fail(-EIO, "post_write to rank " + std::to_string(d.dst_rank) + " (pid " +
                          std::to_string(peers_[d.dst_rank].pid) + "): process_vm_writev wrote " + std::to_string(n) +
                          " of " + std::to_string(d.length) + " bytes: " + std::strerror(err) +
                          (err == EPERM ? " (cross-memory attach needs the same user and ptrace permission)" : ""));
  }

  int check_peer(uint32_t peer) {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (auto e = regions_.check_peer(peer); !e.empty()) return fail(-EINVAL, e);
    return 0;
  }
  int check_write(const WriteDesc& d) {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (auto e = regions_.check_write(d, caps_); !e.empty()) return fail(-EINVAL, "post_write: " + e);
    return 0;
  }

  // Hands every queued copy to the runtime on the next stream (round robin): one batch call where
  // the runtime has it (else one cudaMemcpyAsync each), then ONE event behind them all. A copy
  // that could not be issued completes with -EIO (and no immediate); the error is returned.
  int issue_pending() {
    const std::vector<QueuedCopy>& q = track_.queued();
    const size_t n = q.size();
    if (!n) return 0;
    size_t issued = 0;
    int rc = ensure_device();
    const uint32_t s = next_stream_;
    next_stream_ = (next_stream_ + 1) % static_cast<uint32_t>(streams_.size());
    if (!rc && batch_api_ && n > 1) {
      for (size_t i = 0; i < n; ++i) {
        batch_dsts_[i] = q[i].dst;
        batch_srcs_[i] = q[i].src;
        batch_sizes_[i] = q[i].bytes;
      }
      cudaError_t e = memcpy_batch(batch_dsts_.data(), batch_srcs_.data(), batch_sizes_.data(), n, streams_[s]);
      if (e == cudaSuccess) {
        issued = n;
      } else {
        // Not available here (older driver, a memory kind it refuses): one copy at a time from now
        // on. Copies of the refused call that did go are issued again below: the same bytes to the
        // same place, with the source unchanged until the op completes, and the op is tracked once.
        cudaGetLastError();
        batch_api_ = false;
      }
    }
    while (!rc && issued < n) {
      const QueuedCopy& c = q[issued];
      if (cudaError_t e = cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, streams_[s]); e != cudaSuccess) {
        cudaGetLastError();
        rc = fail(-EIO, "write to rank " + std::to_string(c.op.dst) + ": " + cuda_msg("cudaMemcpyAsync", e));
      } else {
        ++issued;
      }
    }
    track_.commit_issue(s, issued, -EIO);  // the rest (after an error) completes failed, no immediate
    if (const int frc = fence(s); frc && !rc) rc = frc;
    return rc;
  }

  // Records one event behind the stream's copies issued since its last event.
  int fence(uint32_t s) {
    if (!track_.needs_fence(s)) return 0;
    cudaEvent_t ev = nullptr;
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    } else if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
      cudaGetLastError();
      return fail_unfenced(s, cuda_msg("cudaEventCreateWithFlags", e));
    }
    if (cudaError_t e = cudaEventRecord(ev, streams_[s]); e != cudaSuccess) {
      cudaGetLastError();
      free_events_.push_back(ev);
      return fail_unfenced(s, cuda_msg("cudaEventRecord", e));
    }
    track_.fenced(s, ev);
    return 0;
  }
  // Copies already issued but without an event: wait for the stream (bounded by the GPU, this is
  // an error path) and complete them as failed, since we cannot tell when their data landed.
  int fail_unfenced(uint32_t s, const std::string& why) {
    cudaStreamSynchronize(streams_[s]);
    track_.fail_unfenced(s, -EIO);
    return fail(-EIO, "cannot track copy completion: " + why);
  }

  // Moves every copy whose event has fired on to immediate delivery (or straight to done); the
  // copies behind a failed event complete with -EIO.
  void reap_copies() {
    track_.reap(
        [this](cudaEvent_t ev) {
          const cudaError_t e = cudaEventQuery(ev);
          if (e == cudaErrorNotReady) return 0;
          if (e == cudaSuccess) return 1;
          cudaGetLastError();
          fail(-EIO, "copy to a peer failed: " + cuda_msg("cudaEventQuery", e));
          return -EIO;
        },
        [this](cudaEvent_t ev) { free_events_.push_back(ev); }, push_imm());
  }

  // The op's data is in place: its immediate may now go (queued behind earlier ones to that peer).
  void finish_copy(const CopyOp& op) { track_.in_place(op, push_imm()); }
  // The ring's release store of head publishes the immediate after this thread observed the
  // copy's event as complete, so the peer that acquires it finds the data in its memory.
  struct PushImm {
    CudaIpcTransport* t;
    bool operator()(uint32_t peer, uint32_t imm) const { return t->outbox_[peer]->push(t->opt_.rank, imm); }
  };
  PushImm push_imm() { return PushImm{this}; }

  CudaIpcConfig opt_;
  std::string where_ = where();
  Capabilities caps_;
  std::string last_error_;
  bool connected_ = false;
  bool host_exported_ = false;  // a host region was registered: peers write it via process_vm_writev
  Tracker track_;               // every posted operation until its completion is taken
  std::vector<cudaStream_t> streams_;
  uint32_t next_stream_ = 0;
  std::vector<cudaEvent_t> free_events_;
  std::vector<void*> batch_dsts_;  // scratch for the batch call, [max_outstanding]
  std::vector<void*> batch_srcs_;
  std::vector<size_t> batch_sizes_;
  bool issue_error_ = false;             // an issue inside post_writes failed; the next poll() returns -EIO
  bool batch_api_ = true;                // cudaMemcpyBatchAsync in use (off: not asked for, or refused)
  RegionTable regions_{opt_.num_ranks};  // bounds of local and imported regions
  std::vector<WireRegion> exported_;     // [local MrId]: what export_mr hands out
  std::vector<bool> local_host_;         // [local MrId]: host memory
  std::vector<std::vector<bool>> remote_cma_{opt_.num_ranks};  // [peer][remote MrId]: host memory of another process
  std::vector<std::vector<void*>> ipc_mappings_;               // [peer][remote MrId]: to close at teardown
  std::vector<WireAddress> peers_;
  ImmInbox inbox_;
  std::vector<ImmInbox> peer_inboxes_;
  std::vector<ImmInbox*> outbox_;  // outbox_[r]: where immediates for rank r go (own inbox for r == rank)
  uint32_t outstanding_ = 0;       // posted and not yet returned by poll()
};

}  // namespace

std::unique_ptr<Transport> make_endpoint(const CudaIpcConfig& options) {
  return std::make_unique<CudaIpcTransport>(options);
}

}  // namespace anyep::transport::cuda_ipc
