// anyep/src/proxy/barrier_tracker.h — one proxy thread's side of BARRIER (docs/proxy.md,
// "Barrier"): the barriers it entered, the arrivals it counted from each peer (and their epochs),
// the flat barrier over the transport, the hierarchical one through the host's shared-memory words
// (host_barrier.h), and the text that names who is missing when a barrier times out.
//
// The proxy thread owns the ring a BARRIER blocks; it keeps a BarrierState there, calls begin()
// when the command reaches the head and advance() until it returns 1, and feeds kBarrier immediates
// to on_arrival(). Allocates only in the constructor and never throws after it: errors are return
// codes with last_error() saying what was wrong (-EINVAL: mismatched barriers; -EPROTO: the
// transport failed or a peer broke the protocol).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proxy/host_barrier.h"
#include "transport/transport.h"

namespace anyep::proxy {

// One BARRIER in progress on a ring.
struct BarrierState {
  bool rail = false;
  uint64_t epoch = 0;
  uint32_t target = 0;     // barriers every member must have entered
  uint32_t next_peer = 0;  // next peer to send our arrival to
  uint8_t phase = 0;       // hierarchical: 0 quiet, 1 local ranks arrive, 2 across hosts
};

class BarrierTracker {
 public:
  // `hosts` (this rank is hosts.rank of hosts.host_of.size()) and `shm` (null: barriers run flat
  // over `ep`) outlive the tracker; `thread` picks this thread index's shared-memory words.
  BarrierTracker(const HostLayout& hosts, HostShm* shm, uint32_t thread, transport::Transport& ep);

  // A BARRIER command reached the head of its ring: it waits for every member's barrier number
  // target = (barriers this thread entered on that set, this one included).
  void begin(BarrierState& b, bool rail, uint64_t epoch) {
    b.rail = rail;
    b.epoch = epoch;
    b.target = ++barriers_out_[rail];
    b.next_peer = 0;
    b.phase = 0;
  }
  // Drives `b`. `outstanding` counts the ring's posts not yet locally complete: the barrier waits
  // for it to drain, and our arrivals are posted with `context` and counted there too. 1: every
  // member entered (leave); 0: still waiting; < 0: error.
  int advance(BarrierState& b, uint64_t& outstanding, uint64_t context) {
    return b.rail || !shm_ ? flat(b, outstanding, context) : hierarchical(b, outstanding, context);
  }
  // A kBarrier immediate from `src`. 0, or -EPROTO (malformed, or `src` is not a member).
  int on_arrival(uint32_t src, uint32_t imm_value);

  // Who has not entered `b` yet: " rank 3 (host 1, entered 0)" ... (at most 16 named).
  std::string missing(const BarrierState& b, uint64_t outstanding) const;
  // Whether `peer` meets this rank over the transport: the same rail, or (all ranks) host leaders.
  bool in_set(uint32_t peer, bool rail) const {
    return rail ? hosts_.local_index[peer] == hosts_.local_index[hosts_.rank] : hosts_.is_leader(peer);
  }
  uint32_t arrivals(bool rail, uint32_t peer) const { return barriers_in_[rail][peer]; }
  uint32_t entered(bool rail) const { return barriers_out_[rail]; }
  const std::string& last_error() const { return error_; }

 private:
  int flat(BarrierState& b, uint64_t& outstanding, uint64_t context);          // over the transport
  int hierarchical(BarrierState& b, uint64_t& outstanding, uint64_t context);  // shm, then leaders
  int fail(int rc, std::string msg);

  const HostLayout& hosts_;
  HostShm* shm_;
  uint32_t thread_;
  uint32_t num_ranks_;
  transport::Transport& ep_;
  std::vector<uint32_t> barriers_in_[2];  // [all|rail][num_ranks] barrier arrivals counted
  std::vector<uint16_t> epoch_in_[2];     // [all|rail][num_ranks][2] epoch of arrival n at n & 1
  uint32_t barriers_out_[2] = {0, 0};     // barriers this thread entered
  std::string error_;
};

}  // namespace anyep::proxy
