// anyep/src/runtime/ll_proxy_link.h — the LL buffer's channel -> proxy -> transport path, for the
// peers its kernels cannot store to directly (another node, or every peer when each process is
// treated as its own node). Owns the transport endpoints, the command rings, the host-mapped
// signal counters and the proxy; hands the kernels an ll::ProxyPath.
//
// The LL layer picks the transport by path (ANYEP_LL_PATH, docs/ll.md); above this file nothing
// names a transport, below it nothing knows what a token is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "channel/channel.h"
#include "kernels/ll_kernels.h"
#include "proxy/proxy.h"
#include "runtime/ll_path.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/transport.h"

namespace anyep::runtime {

class LLProxyLink {
 public:
  // Endpoints for `path` (kAuto: libfabric with the default provider choice), one per proxy thread.
  static std::vector<std::unique_ptr<transport::Transport>> make_endpoints(LLPath path, int rank, int num_ranks,
                                                                           int device, uint32_t threads);

  // Collective over `boot`: every rank builds its link together. `buffer` (device view `buffer`
  // itself for GPU memory, or host memory for a host-staged buffer) becomes the proxy's one
  // symmetric region. `one_rank_per_node`: each process is its own node (emulated multi-node).
  // `elastic` (a shrink-mode buffer): the proxy drops a peer whose operations fail instead of
  // failing the path (the kernels' waits on it time out and mask it; docs/ll.md).
  LLProxyLink(int num_ranks, int device, std::vector<std::unique_ptr<transport::Transport>> endpoints, void* buffer,
              uint64_t bytes, transport::MemKind kind, bool one_rank_per_node, bool elastic,
              transport::Bootstrap& boot);
  ~LLProxyLink();
  LLProxyLink(const LLProxyLink&) = delete;
  LLProxyLink& operator=(const LLProxyLink&) = delete;

  ll::ProxyPath path() const;
  // Raises the first error of a proxy thread or a ring producer (InvalidArgument / TimeoutError...).
  void check() const;
  // Zeroes the signal counters but the barrier's (the caller has synchronized the device).
  void clear_counters();
  std::string describe() const;  // "cuda-ipc/cuda-ipc, 4 threads, 16 rings" (for messages and logs)
  // Peers the elastic proxy dropped, each with its reason ("" when none).
  std::string dropped_peers() const;

 private:
  std::unique_ptr<channel::Channel> channel_;
  std::unique_ptr<proxy::Proxy> proxy_;
  unsigned long long* counters_host_ = nullptr;
  unsigned long long* counters_dev_ = nullptr;
  std::string transport_name_;
};

}  // namespace anyep::runtime
