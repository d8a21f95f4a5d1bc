// anyep/src/runtime/common/proxy_link.h — a buffer's channel -> proxy -> transport path, for the peers
// its kernels cannot store to directly (another node, or every peer when each process is treated
// as its own node): the LL buffer's proxy path, and the internode HT path's rail exchange. Owns
// the transport endpoints, the command rings, the host-mapped signal counters and the proxy;
// hands the kernels an ProxyPath.
//
// The caller picks the transport by path (ANYEP_LL_PATH, ANYEP_HT_NET_PATH); above this file
// nothing names a transport, below it nothing knows what a token is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "channel/channel.h"
#include "kernels/common/proxy_path.h"
#include "proxy/proxy.h"
#include "runtime/common/path.h"
#include "runtime/common/region.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/transport.h"

namespace anyep::runtime {

class ProxyLink {
 public:
  // Endpoints for `path` (kAuto: libfabric with the default provider choice), one per proxy thread.
  static std::vector<std::unique_ptr<transport::Transport>> make_endpoints(LLPath path, int rank, int num_ranks,
                                                                           int device, uint32_t threads);

  // Collective over `boot`: every rank builds its link together. `label` ("LL", "HT") starts its
  // messages. `buffer` (device view `buffer` itself for GPU memory, or host memory for a
  // host-staged buffer) becomes the proxy's one symmetric region. `ranks_per_node`: 0 detects
  // hosts (ANYEP_PROXY_RANKS_PER_HOST), N >= 1 emulates nodes of N consecutive ranks.
  // `elastic` (a shrink-mode buffer): the proxy drops a peer whose operations fail instead of
  // failing the path (the kernels' waits on it time out and mask it; docs/ll.md).
  ProxyLink(std::string label, int num_ranks, int device, std::vector<std::unique_ptr<transport::Transport>> endpoints,
            void* buffer, uint64_t bytes, transport::MemKind kind, uint32_t ranks_per_node, bool elastic,
            transport::Bootstrap& boot);
  ~ProxyLink();
  ProxyLink(const ProxyLink&) = delete;
  ProxyLink& operator=(const ProxyLink&) = delete;

  ProxyPath path() const;
  // Raises the first error of a proxy thread or a ring producer (InvalidArgument / TimeoutError...).
  void check() const;
  // Which host (node) each rank is on, as the proxy's barriers see it.
  const proxy::HostLayout& hosts() const { return proxy_->hosts(); }
  // Zeroes the signal counters but the barrier's (the caller has synchronized the device).
  void clear_counters();
  std::string describe() const;  // "cuda-ipc/cuda-ipc, 4 threads, 16 rings" (for messages and logs)
  // Peers the elastic proxy dropped, each with its reason ("" when none).
  std::string dropped_peers() const;

 private:
  MappedHostRegion counters_;  // unsigned long long [kNumCounters]; first: freed after the proxy is gone
  std::unique_ptr<channel::Channel> channel_;
  std::unique_ptr<proxy::Proxy> proxy_;
  std::string label_;
  std::string transport_name_;
};

}  // namespace anyep::runtime
