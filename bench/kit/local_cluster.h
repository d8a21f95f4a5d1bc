// anyep/bench/kit/local_cluster.h — R ranks as threads of one process, each with its symmetric
// buffer, counters, channel and proxy: what unit tests, the loopback benchmark and the CPU main
// job's in-process fallback run on. Endpoints come from a factory (default: loopback, one fabric
// per proxy-thread index, so thread i of every rank shares fabric i).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "bench/kit/inproc_bootstrap.h"
#include "channel/channel.h"
#include "proxy/proxy.h"

namespace anyep::benchkit {

using EndpointFactory = std::function<std::unique_ptr<transport::Transport>(uint32_t rank, uint32_t thread)>;

// Loopback endpoints for `ranks` ranks x `threads` threads (through the transport factory; no
// chaos: tests wrap it themselves where they want it).
EndpointFactory loopback_factory(uint32_t ranks, uint32_t threads);

struct LocalClusterConfig {
  uint32_t ranks = 2;
  uint32_t threads = 1;
  uint32_t rings = 1;  // rings per rank (>= threads)
  uint32_t ring_capacity = 1024;
  uint64_t buffer_bytes = 1 << 20;
  uint32_t num_counters = 64;
  proxy::ProxyConfig proxy;   // counters are filled in per rank
  EndpointFactory endpoints;  // empty: loopback
  // Set: called with each rank's copy of `proxy` before its Proxy is built (ranks that disagree).
  std::function<void(uint32_t rank, proxy::ProxyConfig&)> per_rank;
  double bootstrap_timeout_s = 30;
};

class LocalCluster {
 public:
  struct Rank {
    std::unique_ptr<uint64_t[]> buffer;    // symmetric region 0, 16-byte aligned
    std::unique_ptr<uint64_t[]> counters;  // signal targets
    std::unique_ptr<channel::Channel> channel;
    std::unique_ptr<proxy::Proxy> proxy;
    uint8_t* bytes() { return reinterpret_cast<uint8_t*>(buffer.get()); }
  };

  explicit LocalCluster(const LocalClusterConfig& cfg);  // builds every rank (collective setup)
  ~LocalCluster();

  Rank& rank(uint32_t r) { return ranks_[r]; }
  uint32_t size() const { return static_cast<uint32_t>(ranks_.size()); }
  const LocalClusterConfig& config() const { return cfg_; }
  void start();
  void stop();
  // Raises the first proxy error of any rank.
  void check();

 private:
  LocalClusterConfig cfg_;
  std::vector<Rank> ranks_;
};

}  // namespace anyep::benchkit
