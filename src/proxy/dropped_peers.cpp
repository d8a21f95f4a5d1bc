#include "proxy/dropped_peers.h"

namespace anyep::proxy {

DroppedPeers::DroppedPeers(uint32_t num_ranks) : n_(num_ranks), flags_(new std::atomic<uint8_t>[num_ranks]) {
  for (uint32_t p = 0; p < n_; ++p) flags_[p].store(0, std::memory_order_relaxed);
  why_.resize(n_);
}

bool DroppedPeers::drop(uint32_t peer, const std::string& why) {
  if (peer >= n_) return false;
  std::lock_guard<std::mutex> lk(mu_);
  if (flags_[peer].load(std::memory_order_relaxed)) return false;
  why_[peer] = why;
  flags_[peer].store(1, std::memory_order_relaxed);
  return true;
}

std::vector<uint32_t> DroppedPeers::list() const {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < n_; ++p)
    if (has(p)) out.push_back(p);
  return out;
}

std::string DroppedPeers::reason(uint32_t peer) const {
  if (peer >= n_) return "";
  std::lock_guard<std::mutex> lk(mu_);
  return why_[peer];
}

}  // namespace anyep::proxy
