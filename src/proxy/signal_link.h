// anyep/src/proxy/signal_link.h — one proxy thread's SIGNAL traffic with every peer (thread i of
// each rank talks to thread i of every other): outgoing records staged in registered memory,
// per-peer sequence numbers and credits, and the receive side — the signal area peers write their
// records into, which slots were read, credits owed back (docs/proxy.md, "Immediate format": the
// signal record and its flow control).
//
// Owns no thread and no ring: the proxy thread validates a SIGNAL, then calls send(); it feeds
// local completions, kSignal and kCredit immediates in, and calls send_credits() when
// credits_pending(). Like the ordering engine: allocates only in the constructor, never throws
// after it; errors are return codes with last_error() saying what was wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proxy/completion_context.h"
#include "proxy/imm_format.h"
#include "transport/transport.h"

namespace anyep::proxy {

struct SignalLinkConfig {
  uint32_t rank = 0, num_ranks = 1;
  uint32_t signal_slots = 256;   // record slots per peer (power of two >= 4), flow controlled
  uint32_t staging_slots = 256;  // outgoing records in flight
};

class SignalLink {
 public:
  // Registers the signal area, then the staging records on `ep`; they must get ids `first_mr` and
  // `first_mr` + 1 (every rank registers the same sequence, so a peer's ids are ours). Throws
  // InvalidArgument on a bad config, InternalError on other ids.
  SignalLink(const SignalLinkConfig& cfg, transport::Transport& ep, transport::MrId first_mr);
  // Throws InvalidArgument unless signal_slots is a power of two >= 4 and staging_slots >= 1.
  static void check(const SignalLinkConfig& cfg);

  // ---- sender ----
  // Posts `rec` (its seq is filled in here) to `dst`: one write into our slot of dst's signal area
  // with a kSignal immediate, its completion counted against local ring `ring`. 0: sent; -EAGAIN:
  // no credit for dst, no free staging slot, or transport backpressure (nothing sent, retry after
  // polling); else the transport's error (nothing sent; its last_error() says why).
  int send(uint32_t dst, SignalRecord rec, uint32_t ring);
  // A local completion of any post: frees the staging slot it carries, if any.
  void on_complete(uint64_t context) {
    if (const uint64_t s = completion::staging_plus_one(context)) staging_busy_[s - 1] = 0;
  }
  // A kCredit immediate from `src`. 0, or -EPROTO (more credits than slots).
  int on_credit(uint32_t src, uint32_t imm_value);

  // ---- receiver ----
  // A kSignal immediate from `src` (the record is in place): copies the record out to *rec and marks
  // its slot read. 0, or -EPROTO (the slot holds another sequence: overwritten or lost).
  int receive(uint32_t src, uint32_t imm_value, SignalRecord* rec);
  bool credits_pending() const { return credits_pending_; }
  // Returns owed credits (freed slots) to their senders. 0 (on backpressure the rest stays
  // pending), or -EPROTO (the transport failed; *failed_peer, if given, names the peer, and the
  // credits not sent stay pending).
  int send_credits(uint32_t* failed_peer = nullptr);
  // An elastic proxy gave up on `p`: forget the credits owed to it (they would fail again).
  void drop_peer(uint32_t p);

  // ---- state, for timeouts and tests ----
  transport::MrId signal_mr() const { return signal_mr_; }
  transport::MrId staging_mr() const { return staging_mr_; }
  uint32_t credit(uint32_t dst) const { return sig_credit_[dst]; }               // slots we may still fill
  uint32_t next_seq(uint32_t dst) const { return sig_seq_[dst]; }                // of the next record to dst
  uint32_t owed(uint32_t src) const { return credit_owed_[src] + freed_[src]; }  // not yet returned
  const std::string& last_error() const { return error_; }

 private:
  int fail(int rc, std::string msg);

  SignalLinkConfig cfg_;
  transport::Transport& ep_;
  transport::MrId signal_mr_ = 0, staging_mr_ = 0;
  std::unique_ptr<SignalRecord[]> signal_area_;  // [num_ranks][signal_slots], written by peers
  std::unique_ptr<SignalRecord[]> staging_;      // [staging_slots] outgoing records
  std::vector<uint8_t> staging_busy_;            // [staging_slots] posted, not yet complete
  uint32_t staging_next_ = 0;
  // Sender.
  std::vector<uint32_t> sig_seq_;     // [num_ranks] next signal sequence number
  std::vector<uint32_t> sig_credit_;  // [num_ranks] record slots we may still fill
  // Receiver.
  std::vector<uint32_t> freed_;        // [num_ranks] slots freed since our last credit
  std::vector<uint8_t> slot_read_;     // [num_ranks][signal_slots] read, not yet freed
  std::vector<uint32_t> next_unread_;  // [num_ranks] oldest signal seq not yet read
  std::vector<uint32_t> credit_owed_;  // [num_ranks] credits not yet sent (EAGAIN)
  bool credits_pending_ = false;
  std::string error_;
};

}  // namespace anyep::proxy
