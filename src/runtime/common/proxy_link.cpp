#include "runtime/common/proxy_link.h"

#include <cstring>

#include "common/cuda_check.h"
#include "common/env.h"
#include "common/error.h"
#include "transport/factory.h"

namespace anyep::runtime {
namespace {

constexpr uint32_t kRingsPerThread = 4;   // fence groups spread over rings; one group, one ring
constexpr uint32_t kRingCapacity = 4096;  // commands per ring (a DeepEP-shaped call pushes ~1.3 k)

}  // namespace

std::vector<std::unique_ptr<transport::Transport>> ProxyLink::make_endpoints(LLPath path, int rank, int num_ranks,
                                                                             int device, uint32_t threads) {
  // Through the factory, so that ANYEP_CHAOS_SEED puts this path under chaos too.
  const std::string name = path == LLPath::kProxyCudaIpc ? "cuda-ipc" : "libfabric";
  std::string why;
  if (!transport::available(name, &why))
    throw Unsupported(std::string("anyep: proxy path ") + ll_path_name(path) + ": " + why);
  transport::TransportSpec spec =
      transport::TransportSpec::from_env(name, static_cast<uint32_t>(rank), static_cast<uint32_t>(num_ranks));
  spec.cuda_ipc.device = device;
  std::vector<std::unique_ptr<transport::Transport>> eps;
  for (uint32_t t = 0; t < threads; ++t) eps.push_back(transport::make_transport(spec));
  return eps;
}

ProxyLink::ProxyLink(std::string label, int num_ranks, int device,
                     std::vector<std::unique_ptr<transport::Transport>> endpoints, void* buffer, uint64_t bytes,
                     transport::MemKind kind, uint32_t ranks_per_node, bool elastic, transport::Bootstrap& boot)
    : label_(std::move(label)) {
  const std::string who = "anyep " + label_ + " proxy";
  if (endpoints.empty()) throw InvalidArgument(who + ": no transport endpoints");
  // Command offsets are 32-bit in 16-byte units: the whole buffer must be within reach.
  if (bytes > channel::cmd::kMaxOffset)
    throw InvalidArgument(who + ": buffer of " + std::to_string(bytes) +
                          " bytes exceeds the 64 GiB a command can address");
  const auto& caps = endpoints[0]->capabilities();
  transport_name_ = caps.backend + "/" + caps.provider;
  const uint32_t threads = static_cast<uint32_t>(endpoints.size());

  channel::ChannelConfig cc;
  cc.num_rings = threads * kRingsPerThread;
  cc.capacity = kRingCapacity;
  cc.producer = channel::ProducerKind::kGpu;
  cc.cuda_device = device;
  cc.timeout_ns = env::get_duration_ns("ANYEP_TIMEOUT_S");
  channel_ = std::make_unique<channel::Channel>(cc);

  cuda_check(cudaSetDevice(device), who, "cudaSetDevice");
  counters_ = MappedHostRegion(sizeof(unsigned long long) * kNumCounters, (who + " signal counters").c_str(),
                               cudaHostAllocPortable);

  proxy::ProxyConfig pc = proxy::ProxyConfig::from_env();
  pc.num_tags = static_cast<uint32_t>(num_proxy_tags(num_ranks));
  pc.counters = counters_.host_as<uint64_t>();
  pc.num_counters = static_cast<uint32_t>(kNumCounters);
  if (ranks_per_node > 0) pc.ranks_per_node = ranks_per_node;
  pc.drop_failed_peers = elastic;
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "kernel and proxy counters share one layout");
  // A throw from here on frees what was built (members), the counters last.
  proxy_ = std::make_unique<proxy::Proxy>(pc, *channel_, std::move(endpoints),
                                          std::vector<proxy::Region>{{label_ + " buffer", buffer, bytes, kind}}, boot);
  proxy_->start();
}

ProxyLink::~ProxyLink() {
  if (proxy_) proxy_->stop();
  proxy_.reset();
  channel_.reset();
}  // then counters_ (declared first) is freed

ProxyPath ProxyLink::path() const {
  ProxyPath p;
  p.rings = channel_->producer_array();
  p.num_rings = static_cast<int>(channel_->num_rings());
  p.counters = counters_.device_as<unsigned long long>();
  return p;
}

// A proxy error stays: the transport's in-flight state and the ordering engine's are unknown
// after it, so clean() (which zeroes the kernels' side) cannot make the path safe again. Say so
// in the message, keeping the error's type.
void ProxyLink::check() const {
  try {
    proxy_->check();
  } catch (const Error& e) {
    throw_status(e.status(), std::string(e.what()) + " [the " + label_ + " proxy path stays failed after this error" +
                                 (label_ == "LL" ? ": clean_low_latency_buffer does not repair it" : "") +
                                 "; destroy the Buffer and build a new one]");
  }
}

// The barrier's counters (after kNumResetCounters) only grow: the elastic barrier counts arrivals.
void ProxyLink::clear_counters() { std::memset(counters_.host(), 0, sizeof(unsigned long long) * kNumResetCounters); }

std::string ProxyLink::dropped_peers() const {
  std::string out;
  for (uint32_t p : proxy_->dropped().list())
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + ": " + proxy_->dropped().reason(p);
  return out;
}

std::string ProxyLink::describe() const {
  return transport_name_ + ", " + std::to_string(proxy_->num_threads()) + " proxy threads, " +
         std::to_string(channel_->num_rings()) + " rings" + (proxy_->bypass() ? ", ordering engine bypassed" : "") +
         (proxy_->native_atomics() ? ", signals as native atomic adds (ANYEP_PROXY_ATOMICS=native)" : "");
}

}  // namespace anyep::runtime
