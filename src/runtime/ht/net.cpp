#include "runtime/ht/net.h"

#include <cstring>

#include "common/cuda_check.h"
#include "common/env.h"
#include "common/error.h"
#include "kernels/preload.h"
#include "proxy/proxy.h"

namespace anyep::runtime {
namespace {

constexpr const char* kWho = "anyep HT internode";  // what cuda_check's messages start with

LLPath net_path() {
  return env::get_enum("ANYEP_HT_NET_PATH") == "cuda-ipc" ? LLPath::kProxyCudaIpc : LLPath::kProxyLibfabric;
}

}  // namespace

HTNet::HTNet(int rank, int num_ranks, int ranks_per_node, int64_t num_bytes, int device)
    : rank_(rank), num_ranks_(num_ranks), ranks_per_node_(ranks_per_node), num_bytes_(num_bytes), path_(net_path()) {
  using std::to_string;
  if (num_ranks <= 0 || rank < 0 || rank >= num_ranks)
    throw InvalidArgument("anyep HT internode: rank " + to_string(rank) + " out of range for " + to_string(num_ranks) +
                          " ranks");
  if (ranks_per_node < 1 || num_ranks % ranks_per_node != 0 || ranks_per_node > ht::internode::kMaxRanksPerNode ||
      num_ranks / ranks_per_node > ht::internode::kMaxNodes)
    throw Unsupported("anyep HT internode: " + to_string(num_ranks) + " ranks as nodes of " +
                      to_string(ranks_per_node) + "; supported: whole nodes, at most " +
                      to_string(ht::internode::kMaxNodes) + " nodes of at most " +
                      to_string(ht::internode::kMaxRanksPerNode) + " ranks");
  if (exchange().row_capacity(16) < 1)
    throw InvalidArgument("anyep HT internode: num_rdma_bytes=" + to_string(num_bytes) +
                          " leaves no room for the rail exchange (" + to_string(nodes()) +
                          " nodes); see docs/ht.md, \"Internode\"");
  if (static_cast<uint64_t>(num_bytes) > channel::cmd::kMaxOffset)
    throw InvalidArgument("anyep HT internode: num_rdma_bytes=" + to_string(num_bytes) +
                          " exceeds the 64 GiB a proxy command can address");
  if (device < 0) {
    cuda_check(cudaGetDevice(&device_), kWho, "cudaGetDevice");
  } else {
    device_ = device;
  }
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
  cuda_check(preload_kernels(), kWho, "load the anyep kernels (kernels/preload.h)");
  endpoints_ = ProxyLink::make_endpoints(path_, rank, num_ranks, device_, proxy::Proxy::default_threads());
  if (!endpoints_[0]->capabilities().gpu_memory) {
    // Host-staged: pinned host memory the NIC can reach, mapped into the GPU for the kernels.
    staged_ =
        MappedHostRegion(static_cast<size_t>(num_bytes), "anyep HT host-staged exchange region", cudaHostAllocPortable);
    local_ = staged_.device();
  } else {
    region_ = DeviceRegion(static_cast<size_t>(num_bytes), "anyep HT exchange region");
    local_ = region_.data();
  }
  err_ = MappedHostRegion(sizeof(ErrorRecord), "anyep HT internode error record");
  cuda_check(cudaDeviceSynchronize(), kWho, "HT internode set-up");
  timeout_ns_ = env::get_duration_ns("ANYEP_TIMEOUT_S");
}

HTNet::~HTNet() {
  try {
    destroy();
  } catch (...) {
    // Destructors must not throw; destroy() called explicitly reports errors.
  }
}

void HTNet::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();  // no kernel of this rank still uses the memory below
  link_.reset();            // stops the proxy threads before the memory they read goes away
  endpoints_.clear();
  region_.reset();
  staged_.reset();
  local_ = nullptr;
  err_.reset();
}

void HTNet::connect(transport::Bootstrap& boot) {
  if (destroyed_) throw InvalidArgument("anyep HT internode: buffer was destroyed");
  if (boot.size() != static_cast<uint32_t>(num_ranks_) || boot.rank() != static_cast<uint32_t>(rank_))
    throw InvalidArgument("anyep HT internode connect: bootstrap is rank " + std::to_string(boot.rank()) + " of " +
                          std::to_string(boot.size()) + ", the buffer rank " + std::to_string(rank_) + " of " +
                          std::to_string(num_ranks_));
  link_ = std::make_unique<ProxyLink>(
      "HT", num_ranks_, device_, std::move(endpoints_), host_staged() ? staged_.host() : static_cast<void*>(local_),
      static_cast<uint64_t>(num_bytes_), host_staged() ? transport::MemKind::kHost : transport::MemKind::kCuda,
      static_cast<uint32_t>(ranks_per_node_), false, boot);
  endpoints_.clear();
}

std::string HTNet::describe_paths() const {
  std::string out = std::to_string(nodes()) + " nodes of " + std::to_string(ranks_per_node_) +
                    " ranks; rail exchange with the same local rank of every other node through the proxy (";
  out += link_ ? link_->describe() : std::string("not connected");
  out += std::string(")") + (host_staged() ? ", exchange region in pinned host memory" : "");
  return out;
}

void HTNet::check_fits(int64_t rows, uint64_t row_bytes, const char* what) const {
  const ht::internode::Exchange ex = exchange();
  if (rows <= ex.row_capacity(row_bytes)) return;
  throw InvalidArgument(
      std::string("anyep HT internode: ") + what + " sends " + std::to_string(rows) + " rows of " +
      std::to_string(row_bytes) + " bytes to one node, more than a block of the exchange region holds (" +
      std::to_string(ex.row_capacity(row_bytes)) + " rows with num_rdma_bytes=" + std::to_string(num_bytes_) + ", " +
      std::to_string(nodes()) + " nodes); build the Buffer with num_rdma_bytes >= " +
      std::to_string(ht::internode::Exchange::region_bytes(static_cast<uint64_t>(rows), row_bytes, nodes())));
}

void HTNet::ready(const char* what) const {
  if (destroyed_) throw InvalidArgument("anyep HT internode: buffer was destroyed");
  if (!link_) throw InvalidArgument(std::string("anyep HT internode: ") + what + " before connect()");
  check_error();
  cuda_check(cudaSetDevice(device_), kWho, "cudaSetDevice");
}

ht::NetArgs HTNet::args(uint64_t row_bytes) const {
  ht::NetArgs a;
  a.proxy = link_->path();
  a.err = err_.device_as<ErrorRecord>();
  a.local = local_;
  a.host_mem = host_staged();
  a.rank = rank_;
  a.R = num_ranks_;
  a.ranks_per_node = ranks_per_node_;
  a.nodes = nodes();
  a.bytes = static_cast<uint64_t>(num_bytes_);
  a.seq = seq_;
  a.timeout_ns = timeout_ns_;
  a.row_bytes = row_bytes;
  return a;
}

void HTNet::launch(const ht::NetArgs& a, ht::NetStep step, cudaStream_t stream, const char* what) const {
  cuda_check(ht::launch_net(a, step, stream), kWho, what);
}

void HTNet::begin(cudaStream_t stream) {
  ready("begin");
  if (phase_ != Phase::kIdle)
    throw InvalidArgument("anyep HT internode: an exchange began before the previous one finished");
  ++seq_;
  launch(args(16), ht::NetStep::kWaitCredits, stream, "exchange credits launch");
  phase_ = Phase::kBegun;
}

void HTNet::send(const int64_t* send_rows, const int64_t* expect_rows, int64_t* recv_rows, uint64_t row_bytes,
                 cudaStream_t stream) {
  ready("send");
  if (phase_ != Phase::kBegun) throw InvalidArgument("anyep HT internode: send() without begin()");
  if (row_bytes == 0 || row_bytes % 16 != 0)
    throw InvalidArgument("anyep HT internode: row_bytes=" + std::to_string(row_bytes) +
                          " is not a positive multiple of 16");
  ht::NetArgs a = args(row_bytes);
  a.send_rows = send_rows;
  a.expect_rows = expect_rows;
  a.recv_rows = recv_rows;
  launch(a, ht::NetStep::kSend, stream, "exchange send launch");
  phase_ = Phase::kSent;
}

void HTNet::finish(const int64_t* recv_rows, uint8_t* out, uint64_t row_bytes, cudaStream_t stream) {
  ready("finish");
  if (phase_ != Phase::kSent) throw InvalidArgument("anyep HT internode: finish() without send()");
  ht::NetArgs a = args(row_bytes);
  a.recv_rows = const_cast<int64_t*>(recv_rows);
  a.out = out;
  launch(a, ht::NetStep::kCopyOut, stream, "exchange copy launch");
  launch(a, ht::NetStep::kRelease, stream, "exchange credit launch");
  phase_ = Phase::kIdle;
}

void HTNet::check_error() const {
  if (link_) link_->check();
  if (!err_) return;
  ErrorRecord* const rec = err_.host_as<ErrorRecord>();
  const uint32_t code = __atomic_load_n(&rec->code, __ATOMIC_ACQUIRE);
  if (code == kErrNone) return;
  const ErrorRecord e = *rec;
  using std::to_string;
  std::string m = "anyep HT internode: rank " + to_string(e.rank) + ": ";
  if (code == ht::kErrBadExpert) {
    // Bad input, not a broken exchange: raised once (the record cleared), as HTBuffer does.
    std::memset(rec, 0, sizeof(ErrorRecord));
    throw InvalidArgument(m + "topk_idx holds expert " + to_string(e.expert) + " (token " + to_string(e.value) +
                          "), outside [-1, num_experts); its routing skips it");
  }
  switch (code) {
    case ht::kErrNetTimeout:
      m += std::string("timed out waiting for rank ") + to_string(e.peer) + " (node " + to_string(e.expert) +
           (e.value == 0 ? ") to free its block of the previous call (it did not finish that call)"
                         : ") to send its block of this call (it did not make the call, or its proxy is stuck)");
      break;
    case ht::kErrNetOverflow:
      throw InvalidArgument(m + to_string(e.value) + " rows for node " + to_string(e.expert) +
                            " do not fit a block of the exchange region (num_rdma_bytes too small)");
    case ht::kErrNetHeader:
      m += "the block from rank " + to_string(e.peer) + " (node " + to_string(e.expert) + ", " + to_string(e.value) +
           " rows) does not belong to this call (sequence or row count differs: the ranks' calls are out of step)";
      break;
    case kErrRingTimeout:
      m += "a proxy command ring (ring " + to_string(e.value) + ") stayed full";
      break;
    default:
      m += "unknown device error code " + to_string(code);
  }
  m += " (timeout ANYEP_TIMEOUT_S; the Buffer must be rebuilt)";
  throw TimeoutError(m);
}

}  // namespace anyep::runtime
