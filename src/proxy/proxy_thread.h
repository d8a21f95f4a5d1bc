// anyep/src/proxy/proxy_thread.h — one proxy thread: its rings, its transport endpoint, and the
// loop that drives them (docs/proxy.md describes each op). The thread services its rings (WRITE
// batching, QUIET) and polls the transport; what it delegates owns its own state:
//   OrderingEngine   receiver-side fences (ordering_engine.h)
//   SignalLink       SIGNAL records, sequence numbers, credits (signal_link.h)
//   BarrierTracker   BARRIER arrivals and epochs, flat and host barrier (barrier_tracker.h)
//
// Everything the loop touches is allocated in the constructor: the loop itself does not allocate,
// lock, or throw (errors go to the proxy's AsyncError and stop this thread's loop).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "channel/channel.h"
#include "proxy/async_error.h"
#include "proxy/barrier_tracker.h"
#include "proxy/host_barrier.h"
#include "proxy/imm_format.h"
#include "proxy/ordering_engine.h"
#include "proxy/proxy.h"
#include "proxy/signal_link.h"
#include "proxy/symmetric_memory.h"
#include "transport/transport.h"

namespace anyep::proxy {

struct ThreadSetup {
  uint32_t index = 0;  // thread i of T
  uint32_t num_threads = 1;
  uint32_t rank = 0, num_ranks = 1;
  uint64_t timeout_ns = 0;            // resolved (never 0)
  bool bypass = false;                // resolved from cfg.ordering and the transport
  bool native = false;                // signals as native atomic adds (checked against the transport)
  ProxyConfig cfg;                    // sizes: num_tags, signal_slots, staging_slots, batch
  const HostLayout* hosts = nullptr;  // owned by the Proxy
  HostShm* shm = nullptr;             // null when this host has one rank
  DroppedPeers* dropped = nullptr;    // owned by the Proxy; used with cfg.drop_failed_peers
  EngineConfig engine;
};

struct ThreadStats {  // written by the thread (relaxed), read by anyone
  std::atomic<uint64_t> commands{0}, writes{0}, bytes{0}, signals_sent{0}, eagain{0}, signals_applied{0},
      signals_held{0}, dropped{0}, signals_native{0};
};

class ProxyThread {
 public:
  // Registers regions + signal area + staging on `ep` (in that order on every rank), then, with
  // native atomics, the counters (peers add into them).
  ProxyThread(const ThreadSetup& s, std::unique_ptr<transport::Transport> ep, const SymmetricMemory& sym,
              std::vector<channel::RingConsumer*> rings, AsyncError& err);

  transport::Transport& endpoint() { return *ep_; }
  uint32_t num_mrs() const { return static_cast<uint32_t>(sym_.regions().size()) + 2 + (s_.native ? 1 : 0); }
  // Main loop until `stop` is set or an error stops it.
  void run(const std::atomic<bool>& stop);

  const ThreadStats& stats() const { return stats_; }
  const OrderingEngine& engine() const { return engine_; }

 private:
  enum class Step { kDone, kBlocked, kRetry, kFailed, kDropped };
  enum class Block : uint8_t { kNone, kQuiet, kBarrier };
  struct RingState {
    channel::RingConsumer* ring = nullptr;
    uint64_t outstanding = 0;  // posted, not yet locally complete
    uint32_t frozen = 0;       // QUIETs of other rings waiting on this one
    Block block = Block::kNone;
    uint64_t since_ns = 0;
    uint64_t retry_since = 0;  // first failed post attempt of the head command (0: none)
    uint32_t retry_dst = 0;    // the peer that post was for
    // The head is a native SIGNAL waiting for the writes it is fenced after (not backpressure):
    // what it waits for, for the timeout's message.
    bool native_wait = false;
    uint8_t wait_fence = 0;
    uint32_t wait_tag = 0, wait_counter = 0, wait_need = 0, wait_have = 0, wait_adds = 0;
    uint64_t quiet_mask = 0;  // local ring indices the QUIET waits for
    BarrierState barrier;     // the BARRIER at the head (block == kBarrier)
  };
  struct SendGroup {
    uint8_t segment = 0;  // ordered signals sent on (dst, tag), mod 256
    uint32_t writes = 0;  // writes sent in the open segment
  };
  // Native atomics: the sender-side fence of (dst, tag), the mirror of the receiver's engine. Counts
  // are mod 2^32 (only differences are compared).
  struct NativeGroup {
    uint32_t posted = 0;     // writes posted on (dst, tag)
    uint32_t completed = 0;  // of those, locally complete (= placed at the target: placed_writes)
    uint32_t consumed = 0;   // completed writes vouched for by count signals already posted
    uint32_t adds = 0;       // ordered adds posted, not yet complete (= applied)
  };

  bool service_ring(uint32_t r, uint64_t now);
  Step execute(uint32_t r, const channel::TransferCmd& c, uint64_t now);
  // A post's return code: kDone (0), kRetry (-EAGAIN, counted), kDropped (elastic mode: the
  // failure dropped the destination; nothing was sent), or kFailed (the error recorded, naming
  // `what` and its destination).
  Step post_result(uint32_t r, int rc, const char* what, uint32_t dst);
  // WRITEs: validated and built into wq_[slot] (false: rejected, error recorded), then posted
  // together with one post_writes; returns how many went out (*stop: kRetry / kFailed if not all).
  bool build_write(uint32_t r, const channel::TransferCmd& c, uint32_t slot);
  uint32_t flush_writes(uint32_t r, uint32_t n, Step* stop);
  Step do_signal(uint32_t r, const channel::TransferCmd& c);
  Step native_signal(uint32_t r, uint32_t dst, const SignalRecord& rec);
  Step start_quiet(uint32_t r, const channel::TransferCmd& c, uint64_t now);
  bool try_finish(uint32_t r, uint64_t now);
  bool poll_transport(uint64_t now);
  void check_timeouts(uint64_t now);
  void publish_stats();
  Step reject(uint32_t r, const channel::TransferCmd& c, const std::string& why);
  void fatal(anyep_status_t s, const std::string& msg);
  // Elastic mode (cfg.drop_failed_peers): whether traffic to/from `p` is discarded (catching up
  // with drops another thread made), and giving up on `p` (false: not elastic, the caller fails).
  bool gone(uint32_t p);
  bool drop_peer(uint32_t p, const std::string& why);
  void forget_peer(uint32_t p);
  std::string where(uint32_t r) const;
  int local_ring(uint32_t ring_id) const;

  ThreadSetup s_;
  std::unique_ptr<transport::Transport> ep_;
  const SymmetricMemory& sym_;
  AsyncError& err_;
  OrderingEngine engine_;
  SignalLink link_;  // registered on ep_ right after the symmetric regions
  BarrierTracker barrier_;
  std::vector<RingState> rings_;
  bool failed_ = false;
  std::vector<uint8_t> gone_;  // [num_ranks] peers this thread discards (elastic mode)
  uint64_t cur_index_ = 0;     // ring index of the command being executed (error messages)

  std::vector<SendGroup> send_groups_;      // [num_ranks][num_tags] segments of ordered signals
  std::vector<NativeGroup> native_groups_;  // [num_ranks][num_tags] (native atomics only)
  transport::MrId counters_mr_ = 0;         // the counters' registration (native atomics only)

  std::vector<channel::TransferCmd> batch_;
  std::vector<transport::WriteDesc> wq_;  // [batch] WRITEs built, not yet posted
  std::vector<uint32_t> wq_tag_;          // [batch] their tags
  std::vector<transport::Completion> comps_;
  std::vector<transport::ImmEvent> imms_;
  struct {
    uint64_t commands = 0, writes = 0, bytes = 0, signals_sent = 0, eagain = 0, dropped = 0, signals_native = 0;
  } local_;
  ThreadStats stats_;
};

}  // namespace anyep::proxy
