#include "proxy/signal_link.h"

#include <algorithm>

#include "common/error.h"

namespace anyep::proxy {

void SignalLink::check(const SignalLinkConfig& c) {
  if (c.signal_slots < 4 || (c.signal_slots & (c.signal_slots - 1)))
    throw InvalidArgument("proxy: signal_slots must be a power of two >= 4 (got " + std::to_string(c.signal_slots) +
                          ")");
  if (c.staging_slots == 0) throw InvalidArgument("proxy: staging_slots and batch must be >= 1");
}

SignalLink::SignalLink(const SignalLinkConfig& cfg, transport::Transport& ep, transport::MrId first_mr)
    : cfg_(cfg), ep_(ep) {
  check(cfg);
  const uint32_t n = cfg.num_ranks;
  const size_t area = static_cast<size_t>(n) * cfg.signal_slots;
  signal_area_.reset(new SignalRecord[area]());
  staging_.reset(new SignalRecord[cfg.staging_slots]());
  signal_mr_ = ep.register_memory(signal_area_.get(), area * sizeof(SignalRecord), transport::MemKind::kHost);
  staging_mr_ = ep.register_memory(staging_.get(), cfg.staging_slots * sizeof(SignalRecord), transport::MemKind::kHost);
  if (signal_mr_ != first_mr || staging_mr_ != first_mr + 1)
    throw InternalError("proxy: transport assigned unexpected ids to the signal areas");
  staging_busy_.assign(cfg.staging_slots, 0);
  sig_seq_.assign(n, 0);
  sig_credit_.assign(n, cfg.signal_slots);
  freed_.assign(n, 0);
  slot_read_.assign(area, 0);
  next_unread_.assign(n, 0);
  credit_owed_.assign(n, 0);
}

int SignalLink::fail(int rc, std::string msg) {
  error_ = std::move(msg);
  return rc;
}

int SignalLink::send(uint32_t dst, SignalRecord rec, uint32_t ring) {
  const uint32_t slot = staging_next_;
  if (sig_credit_[dst] == 0 || staging_busy_[slot]) return -EAGAIN;
  const uint32_t seq = sig_seq_[dst];
  rec.seq = seq;
  staging_[slot] = rec;
  transport::WriteDesc w;
  w.dst_rank = dst;
  w.local_mr = staging_mr_;
  w.local_offset = static_cast<uint64_t>(slot) * sizeof(SignalRecord);
  w.remote_mr = signal_mr_;
  w.remote_offset =
      (static_cast<uint64_t>(cfg_.rank) * cfg_.signal_slots + (seq & (cfg_.signal_slots - 1))) * sizeof(SignalRecord);
  w.length = sizeof(SignalRecord);
  w.has_imm = true;
  w.imm = imm::encode_signal(seq);
  w.context = completion::make(ring, slot + 1ull, dst);
  if (const int rc = ep_.post_write(w)) return rc;
  // The slot is ours until the write completes locally; the peer hands its record slot back by credit.
  staging_busy_[slot] = 1;
  staging_next_ = slot + 1 == cfg_.staging_slots ? 0 : slot + 1;
  sig_seq_[dst] = (seq + 1) & imm::kSeqMask;
  --sig_credit_[dst];
  return 0;
}

int SignalLink::on_credit(uint32_t src, uint32_t v) {
  sig_credit_[src] += imm::credit_slots(v);
  if (sig_credit_[src] > cfg_.signal_slots)
    return fail(-EPROTO, "rank " + std::to_string(src) + " returned more signal credits than exist");
  return 0;
}

int SignalLink::receive(uint32_t src, uint32_t v, SignalRecord* out) {
  const uint32_t slots = cfg_.signal_slots, seq = imm::signal_seq(v);
  // The transport reports the immediate only after the record landed; copy it out now so the slot
  // can be handed back to the sender.
  *out = signal_area_[static_cast<size_t>(src) * slots + (seq & (slots - 1))];
  if (out->seq != seq)
    return fail(-EPROTO, "signal record " + std::to_string(seq) + " from rank " + std::to_string(src) +
                             " holds sequence " + std::to_string(out->seq) + " (slot overwritten or lost)");
  // Records may be read out of order (unordered transports): a slot is handed back only when every
  // earlier slot of this sender was read too, so credits free a contiguous run.
  uint8_t* read = &slot_read_[static_cast<size_t>(src) * slots];
  read[seq & (slots - 1)] = 1;
  for (uint32_t& n = next_unread_[src]; read[n & (slots - 1)]; n = (n + 1) & imm::kSeqMask) {
    read[n & (slots - 1)] = 0;
    ++freed_[src];
  }
  // Credits go back in batches of a quarter of the slots: fewer immediates, and the sender never
  // waits for a whole window.
  if (freed_[src] >= slots / 4) {
    credit_owed_[src] += freed_[src];
    freed_[src] = 0;
    credits_pending_ = true;
  }
  return 0;
}

int SignalLink::send_credits(uint32_t* failed_peer) {
  credits_pending_ = false;
  for (uint32_t p = 0; p < cfg_.num_ranks; ++p) {
    if (!credit_owed_[p]) continue;
    const int rc = ep_.post_imm(p, imm::encode_credit(credit_owed_[p]), completion::make(completion::kNoRing, 0, p));
    if (rc == -EAGAIN) {
      credits_pending_ = true;
      return 0;
    }
    if (rc) {
      credits_pending_ = true;  // the other peers' credits are still owed
      if (failed_peer) *failed_peer = p;
      return fail(-EPROTO, "returning signal credits to rank " + std::to_string(p) + " failed: " + ep_.last_error());
    }
    credit_owed_[p] = 0;
  }
  return 0;
}

void SignalLink::drop_peer(uint32_t p) {
  // Nothing more is sent to or read from `p`: owed credits are forgotten, and its read marks
  // cleared so that nothing of it is ever handed back.
  credit_owed_[p] = 0;
  freed_[p] = 0;
  std::fill_n(&slot_read_[static_cast<size_t>(p) * cfg_.signal_slots], cfg_.signal_slots, uint8_t{0});
}

}  // namespace anyep::proxy
