// anyep/src/proxy/ordering_engine.h
//
// Receiver side of the proxy: rebuilds "signal after data" on transports that deliver writes out
// of order. A plain data structure fed with arrival events in any order; it applies each signal to
// its counter once everything the signal vouches for has landed. One engine per proxy thread
// (thread i only hears from thread i of each peer). Never throws and never allocates after
// construction; errors are return codes with last_error() naming rank, peer, tag and what was
// missing.
//
// Per (source rank, tag) it keeps:
//   landed / consumed     LL partial completion fence (Fence::kCount): a signal with fence_count
//                         N is applied once landed - consumed >= N, then consumed += N. Count
//                         signals of one group are matched in arrival order; a group has one
//                         round in flight (docs/proxy.md: LL alternates tags between buffers).
//   next_segment,         HT partial order (Fence::kOrdered): every write carries the number of
//   seg_landed[window]    ordered signals the sender had sent on (dst, tag) before it (its
//                         segment, mod 256). The signal closing segment g is applied once g is the
//                         next segment and all of its writes landed. At most kWindow segments may
//                         be unapplied at once; a write or signal further ahead is an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proxy/imm_format.h"

namespace anyep::proxy {

struct EngineConfig {
  uint32_t my_rank = 0;
  uint32_t num_ranks = 1;
  uint32_t num_tags = 64;       // fence groups per source; tags >= this are rejected
  uint32_t max_pending = 4096;  // signals that may be held at once (pool size)
  uint64_t timeout_ns = 30'000'000'000;
  bool bypass = false;           // the transport already lands writes in order: apply on arrival
  uint64_t* counters = nullptr;  // host memory the consumer (kernel) polls with acquire loads
  uint32_t num_counters = 0;
};

struct EngineStats {
  uint64_t writes = 0;
  uint64_t signals_applied = 0;
  uint64_t signals_held = 0;  // signals that had to wait at least once
};

class OrderingEngine {
 public:
  static constexpr uint32_t kWindow = 64;  // unapplied segments per (source, tag)
  static_assert(kWindow < imm::kNumSegments, "the window must be smaller than the segment space");

  explicit OrderingEngine(const EngineConfig& cfg);  // throws InvalidArgument on a bad config

  // A kWrite immediate from `src` (its data is in place). 0, or a negative errno.
  int on_write(uint32_t src, uint32_t imm_value, uint64_t now_ns);
  // A signal record from `src` (already checked against its immediate). 0, or a negative errno.
  int on_signal(uint32_t src, const SignalRecord& rec, uint64_t now_ns);
  // -ETIMEDOUT when a signal has been held longer than timeout_ns (timed_out_src() names its sender).
  int check_timeouts(uint64_t now_ns);
  uint32_t timed_out_src() const { return timed_out_src_; }
  // An elastic proxy gave up on `src`: its held signals are discarded, never applied (the data
  // they vouch for may never come), and its groups start over. The thread feeds nothing more of
  // `src` in.
  void drop_peer(uint32_t src);

  uint32_t held() const { return held_; }
  const EngineStats& stats() const { return stats_; }
  const std::string& last_error() const { return error_; }

 private:
  struct Group {
    uint32_t landed = 0;
    uint32_t consumed = 0;
    int32_t count_head = -1, count_tail = -1;  // FIFO of held count signals
    int32_t ordered = -1;                      // held ordered signals (unsorted list)
    uint8_t next_segment = 0;
    uint32_t seg_landed[kWindow] = {};
  };
  struct Held {
    SignalRecord rec;
    uint32_t src;
    int32_t next;
    uint64_t since_ns;
    bool used;
  };

  Group& group(uint32_t src, uint32_t tag) { return groups_[static_cast<size_t>(src) * cfg_.num_tags + tag]; }
  int apply(uint32_t src, const SignalRecord& rec);
  int add_to_counter(uint32_t src, uint32_t counter, int64_t value, uint32_t tag);
  int hold(uint32_t src, const SignalRecord& rec, uint64_t now_ns, int32_t* out);
  void release(int32_t idx);
  int drain_count(uint32_t src, uint32_t tag, Group& g);
  int drain_ordered(uint32_t src, uint32_t tag, Group& g);
  int fail(int rc, const std::string& msg);

  EngineConfig cfg_;
  std::vector<Group> groups_;
  std::vector<Held> pool_;
  int32_t free_ = -1;
  uint32_t held_ = 0;
  EngineStats stats_;
  std::string error_;
  uint32_t timed_out_src_ = 0;
};

}  // namespace anyep::proxy
