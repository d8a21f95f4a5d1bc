// anyep/src/proxy/proxy.h
//
// One proxy per GPU: T threads, each owning a set of channel rings (ring r -> thread r % T) and
// its own transport endpoint; thread i talks only to thread i of every peer. A thread drains its
// rings in batches, translates and bounds-checks offsets, posts writes and signals, polls
// completions and peer immediates in the same loop, runs the receiver-side ordering engine and
// applies signals to counters in host memory. QUIET and BARRIER hold their ring until complete.
// Semantics of every op: docs/proxy.md.
//
// Errors inside a thread never throw: they go to an AsyncError slot that check() (called by every
// host API entry point) raises.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "channel/channel.h"
#include "proxy/async_error.h"
#include "proxy/dropped_peers.h"
#include "proxy/host_barrier.h"
#include "proxy/symmetric_memory.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/transport.h"

namespace anyep::proxy {

enum class Ordering : uint8_t {
  kAuto,    // bypass the engine when the transport reports ordered_writes
  kEngine,  // always run the ordering engine
  kBypass,  // never (only correct on a transport that lands writes in posting order)
};

// Plain values: the proxy reads no environment variable. from_env() fills the fields the
// environment sets; whoever builds the config at the top (runtime, main job, benchmarks) calls it.
struct ProxyConfig {
  uint32_t num_tags = 64;                // fence groups (LL experts / HT channels) per peer, <= 16384
  uint32_t signal_slots = 256;           // signal-record slots per (peer, thread); flow controlled
  uint32_t staging_slots = 256;          // outgoing signal records in flight per thread
  uint32_t max_pending = 4096;           // held signals per thread
  uint32_t batch = 32;                   // commands drained from a ring at once
  uint64_t timeout_ns = 30'000'000'000;  // longest wait of any op (ANYEP_TIMEOUT_S's default)
  Ordering ordering = Ordering::kAuto;
  // Signals as the transport's remote atomic adds, posted by the sending proxy once the writes they
  // are fenced after completed (docs/proxy.md, "Signals"). Opt-in: Unsupported, naming the
  // transport and why, when its endpoints have no native atomics or no placed_writes; every rank
  // must agree. Off: signals are records the receiving proxy applies (emulated atomics).
  bool native_atomics = false;
  // Elastic (LL shrink mode): a peer whose operations fail is dropped (dropped_peers.h) and its
  // traffic discarded, instead of stopping the proxy with an error naming it.
  bool drop_failed_peers = false;
  // Ranks per host: unset = detect from host identities; N >= 1 = emulated hosts of N consecutive
  // ranks. BARRIER meets through shared memory within a host; the rail barrier joins the ranks
  // with the same index on their host.
  std::optional<uint32_t> ranks_per_node;
  int numa_node = -1;            // pin threads to this node's CPUs (ANYEP_PROXY_CPUS overrides)
  std::vector<int> cpus;         // explicit CPUs (ANYEP_PROXY_CPUS overrides)
  uint64_t* counters = nullptr;  // signal targets in host memory (GPU-mapped for kernels)
  uint32_t num_counters = 0;

  // timeout_ns from ANYEP_TIMEOUT_S, ordering from ANYEP_PROXY_ORDERING, ranks_per_node from
  // ANYEP_PROXY_RANKS_PER_HOST (0: unset); the rest default. InvalidArgument names a bad variable.
  static ProxyConfig from_env();
};

struct ProxyStats {
  uint64_t commands = 0;
  uint64_t writes = 0;
  uint64_t bytes = 0;
  uint64_t signals_sent = 0;
  uint64_t signals_applied = 0;
  uint64_t signals_held = 0;
  uint64_t eagain = 0;
  uint64_t dropped = 0;         // commands discarded because their peer was dropped (drop_failed_peers)
  uint64_t signals_native = 0;  // SIGNALs posted as native remote atomic adds (native_atomics)
};

class ProxyThread;

class Proxy {
 public:
  // `endpoints` (one per thread, T = endpoints.size()) must be fresh: the proxy registers the
  // symmetric `regions` (same lengths on every rank) plus its own signal areas on each, and
  // connects them through `boot` (a collective: every rank constructs its Proxy together).
  Proxy(const ProxyConfig& cfg, channel::Channel& channel, std::vector<std::unique_ptr<transport::Transport>> endpoints,
        const std::vector<Region>& regions, transport::Bootstrap& boot);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  void start();  // launches the threads
  void stop();   // joins them (idempotent)

  // Raises the first error a proxy thread recorded (and the channel's producer timeouts).
  void check() const;
  const AsyncError& error() const { return error_; }
  // Peers given up on (drop_failed_peers; always empty without it), and why.
  const DroppedPeers& dropped() const { return *dropped_; }

  uint32_t rank() const { return rank_; }
  uint32_t num_ranks() const { return num_ranks_; }
  uint32_t num_threads() const { return static_cast<uint32_t>(threads_.size()); }
  bool bypass() const { return bypass_; }
  bool native_atomics() const { return native_; }  // signals go out as the transport's atomic adds
  // One line: the transport, how writes are ordered and which path signals take (native atomics via
  // which transport, or emulated and why), for logs and tests.
  std::string describe_paths() const;
  const HostLayout& hosts() const { return hosts_.layout; }
  const HostShm* host_shm() const { return hosts_.shm.get(); }  // null: one rank on this host
  const SymmetricMemory& memory() const { return *sym_; }
  ProxyStats stats() const;  // sum over threads (relaxed reads; exact once stopped)

  // Threads used by default: ANYEP_PROXY_THREADS.
  static uint32_t default_threads();

 private:
  channel::Channel& channel_;
  uint32_t rank_, num_ranks_;
  bool bypass_ = false;
  bool native_ = false;
  transport::Capabilities caps_;  // of the endpoints (thread 0's)
  std::unique_ptr<SymmetricMemory> sym_;
  Hosts hosts_;
  AsyncError error_;
  std::unique_ptr<DroppedPeers> dropped_;
  std::vector<std::unique_ptr<ProxyThread>> threads_;
  std::vector<std::thread> running_;
  std::vector<int> cpus_;
  std::atomic<bool> stop_{false};
};

}  // namespace anyep::proxy
