// anyep/src/proxy/dropped_peers.h — the peers an elastic proxy (ProxyConfig::drop_failed_peers)
// has given up on, shared by its threads and read by the host API.
//
// A peer is dropped when an operation on it fails in a way only it can explain (a post or a
// completion to it fails, a signal it sent is held past the timeout, a post to it is refused past
// the timeout); from then on every thread discards the traffic to and from it instead of failing.
// The kernels find out on their own: their waits on that peer time out and mask it. A drop is for
// the proxy's life: a dropped peer is never reconnected.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace anyep::proxy {

class DroppedPeers {
 public:
  explicit DroppedPeers(uint32_t num_ranks);

  // Relaxed: a thread that sees the flag late only fails one more post to that peer, which drops
  // it again (a no-op); nothing else is published through the flag.
  bool has(uint32_t peer) const { return flags_[peer].load(std::memory_order_relaxed) != 0; }
  // Marks `peer` dropped, recording why (the first reason is kept). True if this call dropped it.
  bool drop(uint32_t peer, const std::string& why);
  std::vector<uint32_t> list() const;
  std::string reason(uint32_t peer) const;  // "" if not dropped

 private:
  uint32_t n_;
  std::unique_ptr<std::atomic<uint8_t>[]> flags_;
  mutable std::mutex mu_;  // the reasons; taken once per drop, never on the hot path
  std::vector<std::string> why_;
};

}  // namespace anyep::proxy
