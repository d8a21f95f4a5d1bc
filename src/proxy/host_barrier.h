// anyep/src/proxy/host_barrier.h — which ranks share a host, and the POSIX shared-memory words
// through which they meet in a hierarchical BARRIER (docs/proxy.md, "Barrier").
//
// Set up once, collectively, when the Proxy is built: ranks exchange a host identity (hostname +
// kernel boot id) through the bootstrap, or split themselves into emulated hosts of N consecutive
// ranks (ANYEP_PROXY_RANKS_PER_HOST / ProxyConfig::ranks_per_node: tests run several "hosts" on
// one machine). The lowest rank of each host is its leader; it creates one segment per host,
// every other local rank maps it, then the leader unlinks the name at once (nothing is left in
// /dev/shm after setup, even if a process dies later). Names carry a per-job random token, so
// parallel jobs and tests never collide.
// What a proxy thread does with these words during a BARRIER: barrier_tracker.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::proxy {

struct HostLayout {
  uint32_t rank = 0;
  uint32_t host = 0;  // my host
  uint32_t num_hosts = 1;
  uint32_t ranks_per_host = 0;           // 0: detected from host identities; else emulated
  std::vector<uint32_t> host_of;         // [rank] host index (numbered by first rank)
  std::vector<uint32_t> local_index;     // [rank] position among its host's ranks (= its rail)
  std::vector<uint32_t> leader_of_host;  // [host] lowest rank of that host
  std::vector<uint32_t> local_ranks;     // ranks of my host, ascending
  uint32_t local_size() const { return static_cast<uint32_t>(local_ranks.size()); }
  bool is_leader(uint32_t r) const { return local_index[r] == 0; }
  bool leader() const { return is_leader(rank); }
  // "rank 3 (host 1)"
  std::string name(uint32_t r) const;
};

// One counter and the epoch it was stored with; a cache line each (no false sharing between
// ranks spinning on their own words).
struct alignas(64) BarrierWord {
  std::atomic<uint32_t> count{0};  // barriers entered (arrival) / released (leader)
  std::atomic<uint32_t> epoch{0};  // low 32 bits of the BARRIER command's epoch
};
static_assert(sizeof(BarrierWord) == 64, "one cache line per word");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory words must be lock-free (address-free)");

// The mapped segment of one host: per proxy-thread index, one arrival word per local rank and one
// release word written by the leader.
class HostShm {
 public:
  ~HostShm();
  HostShm(const HostShm&) = delete;
  HostShm& operator=(const HostShm&) = delete;
  BarrierWord& arrival(uint32_t thread, uint32_t local) { return words_[thread * (local_size_ + 1) + 1 + local]; }
  BarrierWord& release(uint32_t thread) { return words_[thread * (local_size_ + 1)]; }
  const std::string& name() const { return name_; }

 private:
  friend struct HostShmAccess;
  HostShm() = default;
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t local_size_ = 0;
  BarrierWord* words_ = nullptr;
};

struct Hosts {
  HostLayout layout;
  std::shared_ptr<HostShm> shm;  // null when this host has a single rank
};

// Collective over `boot`. ranks_per_host: 0 = detect from host identities; N = ranks
// [kN, (k+1)N) form host k (must agree on every rank).
Hosts setup_hosts(transport::Bootstrap& boot, uint32_t ranks_per_host, uint32_t num_threads);

}  // namespace anyep::proxy
