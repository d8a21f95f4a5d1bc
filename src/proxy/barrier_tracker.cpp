#include "proxy/barrier_tracker.h"

#include "common/error.h"
#include "proxy/imm_format.h"

namespace anyep::proxy {

BarrierTracker::BarrierTracker(const HostLayout& hosts, HostShm* shm, uint32_t thread, transport::Transport& ep)
    : hosts_(hosts), shm_(shm), thread_(thread), num_ranks_(static_cast<uint32_t>(hosts.host_of.size())), ep_(ep) {
  if (hosts.rank >= num_ranks_ || hosts.local_index.size() != num_ranks_)
    throw InternalError("barrier tracker: host layout does not cover rank " + std::to_string(hosts.rank));
  for (int k = 0; k < 2; ++k)
    barriers_in_[k].assign(num_ranks_, 0), epoch_in_[k].assign(2 * static_cast<size_t>(num_ranks_), 0);
}

int BarrierTracker::fail(int rc, std::string msg) {
  error_ = std::move(msg);
  return rc;
}

// Rail: the same index on every host. All ranks: host leaders over the transport (the other local
// ranks meet their leader in shared memory); with one rank per host, every rank.
int BarrierTracker::flat(BarrierState& b, uint64_t& outstanding, uint64_t context) {
  // This ring's writes are remotely complete first, so whoever leaves the barrier sees them; then
  // our arrival goes to every member; then we wait for theirs.
  if (outstanding) return 0;
  const uint32_t me = hosts_.rank;
  for (; b.next_peer < num_ranks_; ++b.next_peer) {
    const uint32_t p = b.next_peer;
    if (p == me || !in_set(p, b.rail)) continue;
    // Counted on the ring: the barrier retires only once our arrivals are complete too, so a peer
    // that leaves the barrier and shuts down cannot strand our arrival in its transport.
    const int rc = ep_.post_imm(p, imm::encode_barrier(static_cast<uint32_t>(b.epoch), b.rail), context);
    if (rc == -EAGAIN) return 0;
    if (rc) return fail(-EPROTO, "BARRIER: posting to rank " + std::to_string(p) + " failed: " + ep_.last_error());
    ++outstanding;
  }
  if (outstanding) return 0;
  for (uint32_t p = 0; p < num_ranks_; ++p)
    if (p != me && in_set(p, b.rail) && barriers_in_[b.rail][p] < b.target) return 0;
  // A member is at most one barrier ahead (it needs our arrival to leave this one), so arrivals n
  // and n+1 sit in different halves of its two-entry epoch record.
  const uint32_t mine = static_cast<uint32_t>(b.epoch) & imm::kEpochMask;
  for (uint32_t p = 0; p < num_ranks_; ++p) {
    if (p == me || !in_set(p, b.rail)) continue;
    const uint32_t e = epoch_in_[b.rail][2 * p + (b.target & 1)];
    if (e != mine)
      return fail(-EINVAL, std::string(b.rail ? "rail " : "") + "BARRIER #" + std::to_string(b.target) + ": " +
                               hosts_.name(p) + " entered it with epoch " + std::to_string(e) +
                               " but this rank with epoch " + std::to_string(mine) +
                               " (mod 2^16; mismatched barriers)");
  }
  return 1;
}

// Shared memory within the host, then the leaders across hosts (flat among them).
int BarrierTracker::hierarchical(BarrierState& b, uint64_t& outstanding, uint64_t context) {
  const HostLayout& hl = hosts_;
  const uint32_t epoch = static_cast<uint32_t>(b.epoch);
  if (b.phase == 0) {
    // Our writes are remotely complete before we announce arrival, so whoever leaves sees them.
    if (outstanding) return 0;
    BarrierWord& w = shm_->arrival(thread_, hl.local_index[hl.rank]);
    w.epoch.store(epoch, std::memory_order_relaxed);
    // Release: the epoch (and everything this rank did before) is visible to the leader that
    // acquires the count.
    w.count.store(b.target, std::memory_order_release);
    b.phase = 1;
  }
  BarrierWord& rel = shm_->release(thread_);
  if (!hl.leader()) return rel.count.load(std::memory_order_acquire) >= b.target ? 1 : 0;
  if (b.phase == 1) {
    for (uint32_t j = 1; j < hl.local_size(); ++j)
      if (shm_->arrival(thread_, j).count.load(std::memory_order_acquire) < b.target) return 0;
    // A local rank cannot have entered the next barrier yet (it waits for our release), so the
    // epoch read here is the one it stored for this barrier.
    for (uint32_t j = 1; j < hl.local_size(); ++j) {
      const uint32_t e = shm_->arrival(thread_, j).epoch.load(std::memory_order_relaxed);
      if (e != epoch)
        return fail(-EINVAL, "BARRIER #" + std::to_string(b.target) + ": " + hl.name(hl.local_ranks[j]) +
                                 " entered it with epoch " + std::to_string(e) + " but this rank with epoch " +
                                 std::to_string(epoch) + " (mismatched barriers)");
    }
    b.phase = 2;
  }
  if (hl.num_hosts > 1) {
    const int rc = flat(b, outstanding, context);
    if (rc <= 0) return rc;
  }
  rel.epoch.store(epoch, std::memory_order_relaxed);
  // Release: every local rank that acquires this count leaves after all hosts entered.
  rel.count.store(b.target, std::memory_order_release);
  return 1;
}

int BarrierTracker::on_arrival(uint32_t src, uint32_t v) {
  if (!imm::barrier_reserved_clear(v))
    return fail(-EPROTO, "malformed barrier immediate from rank " + std::to_string(src));
  const bool rail = imm::barrier_rail(v);
  if (!in_set(src, rail) || (!rail && !hosts_.leader()))
    return fail(-EPROTO, std::string(rail ? "rail " : "") + "barrier arrival from " + hosts_.name(src) +
                             ", which is not a member of this rank's barrier (ranks disagree on the host layout?)");
  const uint32_t n = ++barriers_in_[rail][src];
  epoch_in_[rail][2 * src + (n & 1)] = static_cast<uint16_t>(imm::barrier_epoch(v));
  return 0;
}

std::string BarrierTracker::missing(const BarrierState& b, uint64_t outstanding) const {
  const HostLayout& hl = hosts_;
  std::string m;
  uint32_t shown = 0;
  if (outstanding) m = " (own ring still has " + std::to_string(outstanding) + " incomplete writes)";
  const bool local = !b.rail && shm_;
  if (local && b.phase >= 1) {
    // Ranks of this host that have not stored their arrival (any local rank can read the words).
    for (uint32_t j = 0; j < hl.local_size() && shown < 16; ++j) {
      const uint32_t c = shm_->arrival(thread_, j).count.load(std::memory_order_acquire);
      const uint32_t p = hl.local_ranks[j];
      if (c < b.target)
        m +=
            " rank " + std::to_string(p) + " (host " + std::to_string(hl.host) + ", entered " + std::to_string(c) + ")",
            ++shown;
    }
    if (!hl.leader()) {
      if (!shown)
        m += " another host: every rank of host " + std::to_string(hl.host) + " entered; its leader rank " +
             std::to_string(hl.leader_of_host[hl.host]) + " waits for the other hosts' leaders";
      return m;
    }
    if (shown || b.phase < 2) return m;
  } else if (local) {
    return m;
  }
  for (uint32_t p = 0; p < num_ranks_ && shown < 16; ++p)
    if (p != hl.rank && in_set(p, b.rail) && barriers_in_[b.rail][p] < b.target) {
      const std::string n = std::to_string(barriers_in_[b.rail][p]);
      m += local ? " host " + std::to_string(hl.host_of[p]) + " (its leader rank " + std::to_string(p) + " entered " +
                       n + ")"
                 : " rank " + std::to_string(p) + " (host " + std::to_string(hl.host_of[p]) + ", entered " + n + ")";
      ++shown;
    }
  return m;
}

}  // namespace anyep::proxy
