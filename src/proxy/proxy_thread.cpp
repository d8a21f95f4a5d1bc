#include "proxy/proxy_thread.h"

#include <sched.h>

#include <cstring>

#include "common/error.h"

namespace anyep::proxy {

namespace {
// Completion context: bits 0..15 local ring (kNoRing: not counted against a ring),
// bits 16..47 staging slot + 1 (0: none).
constexpr uint64_t kNoRing = 0xffff;
constexpr uint64_t ctx(uint64_t ring, uint64_t staging_plus_one = 0) { return ring | (staging_plus_one << 16); }

anyepStatus status_of(int rc) {
  switch (rc) {
    case -ETIMEDOUT: return anyepTimeout;
    case -EINVAL: return anyepInvalidArgument;
    case -EPROTO: return anyepTransportError;
    default: return anyepInternalError;
  }
}
}  // namespace

ProxyThread::ProxyThread(const ThreadSetup& s, std::unique_ptr<transport::Transport> ep, const SymmetricMemory& sym,
                         std::vector<RingConsumer*> rings, AsyncError& err)
    : s_(s), ep_(std::move(ep)), sym_(sym), err_(err), engine_(s.engine) {
  if (rings.size() > 64)
    throw InvalidArgument("proxy thread " + std::to_string(s.index) + ": " + std::to_string(rings.size()) +
                          " rings; at most 64 per thread (use more threads)");
  if (s.cfg.signal_slots < 4 || (s.cfg.signal_slots & (s.cfg.signal_slots - 1)))
    throw InvalidArgument("proxy: signal_slots must be a power of two >= 4 (got " + std::to_string(s.cfg.signal_slots) + ")");
  if (s.cfg.staging_slots == 0 || s.cfg.batch == 0)
    throw InvalidArgument("proxy: staging_slots and batch must be >= 1");
  if (!s.hosts || s.hosts->host_of.size() != s.num_ranks) throw InternalError("proxy thread: no host layout");
  for (RingConsumer* r : rings) rings_.push_back(RingState{r});

  const uint32_t n = s.num_ranks;
  for (uint32_t k = 0; k < sym.regions().size(); ++k) {
    const Region& r = sym.regions()[k];
    if (ep_->register_memory(r.base, r.length, r.kind) != k)
      throw InternalError("proxy: transport assigned an unexpected id to region '" + r.name + "'");
  }
  const size_t area = static_cast<size_t>(n) * s.cfg.signal_slots;
  signal_area_.reset(new SignalRecord[area]());
  staging_.reset(new SignalRecord[s.cfg.staging_slots]());
  signal_mr_ = ep_->register_memory(signal_area_.get(), area * sizeof(SignalRecord), transport::MemKind::kHost);
  staging_mr_ = ep_->register_memory(staging_.get(), s.cfg.staging_slots * sizeof(SignalRecord), transport::MemKind::kHost);
  if (signal_mr_ != sym.regions().size() || staging_mr_ != signal_mr_ + 1)
    throw InternalError("proxy: transport assigned unexpected ids to the signal areas");
  staging_busy_.assign(s.cfg.staging_slots, 0);

  send_groups_.resize(static_cast<size_t>(n) * s.cfg.num_tags);
  sig_seq_.assign(n, 0);
  sig_credit_.assign(n, s.cfg.signal_slots);
  freed_.assign(n, 0);
  slot_read_.assign(area, 0);
  next_unread_.assign(n, 0);
  credit_owed_.assign(n, 0);
  for (int k = 0; k < 2; ++k) barriers_in_[k].assign(n, 0), epoch_in_[k].assign(2 * static_cast<size_t>(n), 0);
  batch_.resize(s.cfg.batch);
  wq_.resize(s.cfg.batch);
  wq_tag_.resize(s.cfg.batch);
  comps_.resize(256);
  imms_.resize(256);
}

std::string ProxyThread::where(uint32_t r) const {
  std::string s = "rank " + std::to_string(s_.rank) + " proxy thread " + std::to_string(s_.index);
  if (r < rings_.size())
    s += " ring " + std::to_string(rings_[r].ring->ring_id()) + " index " + std::to_string(cur_index_);
  return s;
}

void ProxyThread::fatal(anyepStatus st, const std::string& msg) {
  err_.set(st, msg);
  failed_ = true;
}

ProxyThread::Step ProxyThread::reject(uint32_t r, const TransferCmd& c, const std::string& why) {
  // The command is retired without reaching the NIC; the host API raises the error.
  err_.set(anyepInvalidArgument, where(r) + ": rejected command (lo=" + std::to_string(c.lo) +
                                     " hi=" + std::to_string(c.hi) + "): " + why);
  return Step::kDone;
}

int ProxyThread::local_ring(uint32_t ring_id) const {
  if (ring_id % s_.num_threads != s_.index) return -1;
  const uint32_t li = ring_id / s_.num_threads;
  return li < rings_.size() ? static_cast<int>(li) : -1;
}

void ProxyThread::run(const std::atomic<bool>& stop) {
  uint32_t idle = 0;
  for (uint64_t iter = 0; !failed_ && !stop.load(std::memory_order_relaxed); ++iter) {
    const uint64_t now = port::now_ns();
    bool busy = false;
    for (uint32_t r = 0; r < rings_.size() && !failed_; ++r) busy |= service_ring(r, now);
    if (!failed_) busy |= poll_transport(now);
    if (credits_pending_ && !failed_) send_credits();
    if ((iter & 255) == 0 && !failed_) check_timeouts(now);
    if (busy) {
      idle = 0;
      publish_stats();
    } else if (++idle > 256) {
      sched_yield();  // idle: let producers (and other ranks' threads in tests) run
    }
  }
  publish_stats();
}

void ProxyThread::publish_stats() {
  // Plain counters on the hot path; relaxed stores make them readable by other threads.
  stats_.commands.store(local_.commands, std::memory_order_relaxed);
  stats_.writes.store(local_.writes, std::memory_order_relaxed);
  stats_.bytes.store(local_.bytes, std::memory_order_relaxed);
  stats_.signals_sent.store(local_.signals_sent, std::memory_order_relaxed);
  stats_.eagain.store(local_.eagain, std::memory_order_relaxed);
  stats_.signals_applied.store(engine_.stats().signals_applied, std::memory_order_relaxed);
  stats_.signals_held.store(engine_.stats().signals_held, std::memory_order_relaxed);
}

bool ProxyThread::service_ring(uint32_t r, uint64_t now) {
  RingState& st = rings_[r];
  bool progress = false;
  if (st.block != Block::kNone) {
    if (!try_finish(r, now)) return false;
    progress = true;
  }
  if (st.frozen) return progress;
  const uint32_t n = st.ring->poll_batch(batch_.data(), s_.cfg.batch);
  uint32_t done = 0;    // commands retired, in ring order
  uint32_t queued = 0;  // consecutive WRITEs after them, built and waiting for one post_writes
  Step stop = Step::kDone;
  for (uint32_t k = 0; k < n; ++k) {
    cur_index_ = st.ring->tail() + k;
    const TransferCmd& c = batch_[k];
    const bool write = cmd_op(c) == Op::kWrite;
    if (write && build_write(r, c, queued)) {
      ++queued;
      continue;
    }
    // Anything else (or a rejected WRITE) runs only after the WRITEs before it were posted: the
    // ring's order is what the ordering engine and QUIET rely on.
    if (queued) {
      const uint32_t posted = flush_writes(r, queued, &stop);
      done += posted;
      const bool all = posted == queued;
      queued = 0;
      if (!all) break;
    }
    if (write) {  // rejected: retired without reaching the NIC
      ++done;
      continue;
    }
    const Step step = execute(r, c, now);
    if (step == Step::kDone) {
      ++done;
      continue;
    }
    stop = step;
    // kBlocked: the command stays at the head of the ring until try_finish retires it.
    break;
  }
  if (queued) done += flush_writes(r, queued, &stop);
  if (stop == Step::kRetry && !st.retry_since) st.retry_since = now;
  if (done) {
    st.ring->pop(done);
    st.retry_since = 0;
    local_.commands += done;
  }
  return progress || done || st.block != Block::kNone;
}

uint32_t ProxyThread::flush_writes(uint32_t r, uint32_t n, Step* stop) {
  size_t posted = 0;
  const int rc = ep_->post_writes(wq_.data(), n, &posted);
  for (size_t i = 0; i < posted; ++i) {
    const transport::WriteDesc& w = wq_[i];
    ++send_groups_[static_cast<size_t>(w.dst_rank) * s_.cfg.num_tags + wq_tag_[i]].writes;
    local_.bytes += w.length;
  }
  rings_[r].outstanding += posted;
  local_.writes += posted;
  if (rc == -EAGAIN) {
    local_.eagain += 1;
    *stop = Step::kRetry;  // the loop polls completions, then retries the rest
  } else if (rc) {
    fatal(anyepTransportError, where(r) + ": posting WRITE to rank " + std::to_string(wq_[posted].dst_rank) +
                                   " failed: " + ep_->last_error());
    *stop = Step::kFailed;
  }
  return static_cast<uint32_t>(posted);
}

ProxyThread::Step ProxyThread::execute(uint32_t r, const TransferCmd& c, uint64_t now) {
  switch (cmd_op(c)) {
    case Op::kNop: return Step::kDone;
    case Op::kWrite: return Step::kFailed;  // never here: service_ring builds and posts WRITEs in batches
    case Op::kSignal: return do_signal(r, c);
    case Op::kQuiet: return start_quiet(r, c, now);
    case Op::kBarrier: {
      RingState& st = rings_[r];
      const bool rail = cmd_flags(c) & cmd::kBarrierRail;
      st.block = Block::kBarrier;
      st.since_ns = now;
      st.rail = rail;
      st.epoch = cmd_epoch(c);
      st.target = ++barriers_out_[rail];
      st.next_peer = 0;
      st.phase = 0;
      return Step::kBlocked;
    }
    default:
      return reject(r, c, "corrupted command: op " + std::to_string(static_cast<int>(cmd_op(c))) +
                              " is not a valid operation");
  }
}

ProxyThread::Step ProxyThread::post(uint32_t r, const transport::WriteDesc& w, const char* what) {
  const int rc = ep_->post_write(w);
  if (rc == -EAGAIN) {
    local_.eagain += 1;
    return Step::kRetry;  // the loop polls completions, then retries this command
  }
  if (rc) {
    fatal(anyepTransportError, where(r) + ": posting " + what + " to rank " + std::to_string(w.dst_rank) +
                                   " failed: " + ep_->last_error());
    return Step::kFailed;
  }
  return Step::kDone;
}

bool ProxyThread::build_write(uint32_t r, const TransferCmd& c, uint32_t slot) {
  const uint32_t dst = cmd_dst_rank(c), tag = cmd_tag(c);
  const uint64_t len = cmd_length(c), so = cmd_src_offset(c), dof = cmd_dst_offset(c);
  std::string why;
  Where src{0, 0}, dw{0, 0};
  if (dst >= s_.num_ranks) {
    why = "WRITE to rank " + std::to_string(dst) + ", but there are only " + std::to_string(s_.num_ranks) +
          " ranks (missing peer)";
  } else if (tag >= s_.cfg.num_tags) {
    why = "WRITE tag " + std::to_string(tag) + " >= num_tags " + std::to_string(s_.cfg.num_tags);
  } else if (!sym_.translate(so, len, &src)) {
    why = "WRITE source [" + std::to_string(so) + ", +" + std::to_string(len) + ") is outside the symmetric memory (" +
          sym_.describe() + ")";
  } else if (!sym_.translate(dof, len, &dw)) {
    why = "WRITE destination [" + std::to_string(dof) + ", +" + std::to_string(len) + ") on rank " + std::to_string(dst) +
          " is outside the symmetric memory (" + sym_.describe() + ")";
  }
  if (!why.empty()) {
    reject(r, c, why);
    return false;
  }
  // The segment is read now: an ordered SIGNAL that closes it runs only after this WRITE was posted.
  const SendGroup& g = send_groups_[static_cast<size_t>(dst) * s_.cfg.num_tags + tag];
  const bool plus_one = cmd_flags(c) & cmd::kWriteSignal;
  transport::WriteDesc& w = wq_[slot];
  w.dst_rank = dst;
  w.local_mr = src.region;
  w.local_offset = src.offset;
  w.remote_mr = dw.region;
  w.remote_offset = dw.offset;
  w.length = len;
  // Bypass: the receiver needs an immediate only to apply a piggybacked +1.
  w.has_imm = !s_.bypass || plus_one;
  w.imm = imm::make_write(tag, g.segment, plus_one);
  w.context = ctx(r);
  wq_tag_[slot] = tag;
  return true;
}

ProxyThread::Step ProxyThread::do_signal(uint32_t r, const TransferCmd& c) {
  const uint32_t dst = cmd_dst_rank(c), tag = cmd_tag(c), counter = cmd_counter(c);
  const uint8_t flags = cmd_flags(c);
  if (dst >= s_.num_ranks)
    return reject(r, c, "SIGNAL to rank " + std::to_string(dst) + ", but there are only " +
                            std::to_string(s_.num_ranks) + " ranks (missing peer)");
  if (tag >= s_.cfg.num_tags)
    return reject(r, c, "SIGNAL tag " + std::to_string(tag) + " >= num_tags " + std::to_string(s_.cfg.num_tags));
  if (counter >= s_.engine.num_counters)
    return reject(r, c, "SIGNAL counter " + std::to_string(counter) + " >= num_counters " +
                            std::to_string(s_.engine.num_counters));
  if ((flags & cmd::kFenceCount) && (flags & cmd::kFenceOrdered))
    return reject(r, c, "SIGNAL asks for both the count fence and the ordered fence");
  if (sig_credit_[dst] == 0 || staging_busy_[staging_next_]) {
    local_.eagain += 1;
    return Step::kRetry;  // the loop polls completions and credits, then retries
  }
  SendGroup& g = send_groups_[static_cast<size_t>(dst) * s_.cfg.num_tags + tag];
  const Fence fence = (flags & cmd::kFenceCount) ? Fence::kCount : (flags & cmd::kFenceOrdered) ? Fence::kOrdered : Fence::kNone;
  const uint32_t seq = sig_seq_[dst];
  const uint32_t slot = staging_next_;
  SignalRecord& rec = staging_[slot];
  rec = SignalRecord{};
  rec.seq = seq;
  rec.counter = counter;
  rec.value = cmd_signal_value(c);
  rec.tag = static_cast<uint16_t>(tag);
  rec.fence = static_cast<uint8_t>(fence);
  rec.segment = g.segment;
  rec.fence_count = fence == Fence::kOrdered ? g.writes : cmd_fence_count(c);
  transport::WriteDesc w;
  w.dst_rank = dst;
  w.local_mr = staging_mr_;
  w.local_offset = static_cast<uint64_t>(slot) * sizeof(SignalRecord);
  w.remote_mr = signal_mr_;
  w.remote_offset = (static_cast<uint64_t>(s_.rank) * s_.cfg.signal_slots + (seq & (s_.cfg.signal_slots - 1))) * sizeof(SignalRecord);
  w.length = sizeof(SignalRecord);
  w.has_imm = true;
  w.imm = imm::make_signal(seq);
  w.context = ctx(r, slot + 1);
  if (const Step st = post(r, w, "SIGNAL"); st != Step::kDone) return st;
  staging_busy_[slot] = 1;
  staging_next_ = slot + 1 == s_.cfg.staging_slots ? 0 : slot + 1;
  sig_seq_[dst] = (seq + 1) & imm::kSeqMask;
  --sig_credit_[dst];
  if (fence == Fence::kOrdered) {
    ++g.segment;  // uint8_t: wraps mod 256 with the wire field
    g.writes = 0;
  }
  ++rings_[r].outstanding;
  local_.signals_sent += 1;
  return Step::kDone;
}

ProxyThread::Step ProxyThread::start_quiet(uint32_t r, const TransferCmd& c, uint64_t now) {
  uint64_t m = 1ull << r;
  for (uint64_t named = cmd_ring_mask(c); named; named &= named - 1) {
    const uint32_t id = static_cast<uint32_t>(__builtin_ctzll(named));
    const int lr = local_ring(id);
    if (lr < 0)
      return reject(r, c, "QUIET names ring " + std::to_string(id) + ", which proxy thread " +
                              std::to_string(s_.index) + " does not own (a QUIET may only name rings of its thread)");
    m |= 1ull << lr;
  }
  bool clear = true;
  for (uint64_t b = m; b; b &= b - 1) clear &= rings_[__builtin_ctzll(b)].outstanding == 0;
  if (clear) return Step::kDone;
  RingState& st = rings_[r];
  st.block = Block::kQuiet;
  st.since_ns = now;
  st.quiet_mask = m;
  // Other named rings post nothing new until this QUIET completes, so it cannot be starved.
  for (uint64_t b = m & ~(1ull << r); b; b &= b - 1) ++rings_[__builtin_ctzll(b)].frozen;
  return Step::kBlocked;
}

bool ProxyThread::in_barrier_set(uint32_t peer, bool rail) const {
  // Rail: the same index on every host. All ranks: host leaders over the transport (the other
  // local ranks meet their leader in shared memory); with one rank per host, every rank.
  const HostLayout& L = *s_.hosts;
  return rail ? L.local_index[peer] == L.local_index[s_.rank] : L.is_leader(peer);
}

bool ProxyThread::try_finish(uint32_t r, uint64_t now) {
  RingState& st = rings_[r];
  if (st.block == Block::kQuiet) {
    for (uint64_t b = st.quiet_mask; b; b &= b - 1)
      if (rings_[__builtin_ctzll(b)].outstanding) return false;
    for (uint64_t b = st.quiet_mask & ~(1ull << r); b; b &= b - 1) --rings_[__builtin_ctzll(b)].frozen;
  } else if (st.rail || !s_.shm) {
    if (!flat_barrier(r)) return false;
  } else if (!host_barrier(r)) {
    return false;
  }
  st.block = Block::kNone;
  st.ring->pop(1);
  local_.commands += 1;
  (void)now;
  return true;
}

bool ProxyThread::host_barrier(uint32_t r) {
  RingState& st = rings_[r];
  const HostLayout& L = *s_.hosts;
  const uint32_t epoch = static_cast<uint32_t>(st.epoch);
  if (st.phase == 0) {
    // Our writes are remotely complete before we announce arrival, so whoever leaves sees them.
    if (st.outstanding) return false;
    BarrierWord& w = s_.shm->arrival(s_.index, L.local_index[s_.rank]);
    w.epoch.store(epoch, std::memory_order_relaxed);
    // Release: the epoch (and everything this rank did before) is visible to the leader that
    // acquires the count.
    w.count.store(static_cast<uint32_t>(st.target), std::memory_order_release);
    st.phase = 1;
  }
  BarrierWord& rel = s_.shm->release(s_.index);
  if (!L.leader()) return rel.count.load(std::memory_order_acquire) >= st.target;
  if (st.phase == 1) {
    for (uint32_t j = 1; j < L.local_size(); ++j)
      if (s_.shm->arrival(s_.index, j).count.load(std::memory_order_acquire) < st.target) return false;
    // A local rank cannot have entered the next barrier yet (it waits for our release), so the
    // epoch read here is the one it stored for this barrier.
    for (uint32_t j = 1; j < L.local_size(); ++j) {
      const uint32_t e = s_.shm->arrival(s_.index, j).epoch.load(std::memory_order_relaxed);
      if (e != epoch) {
        fatal(anyepInvalidArgument, where(r) + ": BARRIER #" + std::to_string(st.target) + ": " +
                                        L.name(L.local_ranks[j]) + " entered it with epoch " + std::to_string(e) +
                                        " but this rank with epoch " + std::to_string(epoch) + " (mismatched barriers)");
        return false;
      }
    }
    st.phase = 2;
  }
  if (L.num_hosts > 1 && !flat_barrier(r)) return false;
  rel.epoch.store(epoch, std::memory_order_relaxed);
  // Release: every local rank that acquires this count leaves after all hosts entered.
  rel.count.store(static_cast<uint32_t>(st.target), std::memory_order_release);
  return true;
}

bool ProxyThread::flat_barrier(uint32_t r) {
  RingState& st = rings_[r];
  // BARRIER: this ring's writes are remotely complete first, so whoever leaves the barrier
  // sees them; then our arrival goes to every member; then we wait for theirs.
  if (st.outstanding) return false;
  for (; st.next_peer < s_.num_ranks; ++st.next_peer) {
    const uint32_t p = st.next_peer;
    if (p == s_.rank || !in_barrier_set(p, st.rail)) continue;
    // Counted on this ring: the barrier retires only once our arrivals are complete too, so a
    // peer that leaves the barrier and shuts down cannot strand our arrival in its transport.
    const int rc = ep_->post_imm(p, imm::make_barrier(static_cast<uint32_t>(st.epoch), st.rail), ctx(r));
    if (rc == -EAGAIN) return false;
    if (rc) {
      fatal(anyepTransportError, where(r) + ": BARRIER: posting to rank " + std::to_string(p) + " failed: " + ep_->last_error());
      return false;
    }
    ++st.outstanding;
  }
  if (st.outstanding) return false;
  for (uint32_t p = 0; p < s_.num_ranks; ++p)
    if (p != s_.rank && in_barrier_set(p, st.rail) && barriers_in_[st.rail][p] < st.target) return false;
  // A member is at most one barrier ahead (it needs our arrival to leave this one), so arrivals
  // n and n+1 sit in different halves of its two-entry epoch record.
  const uint32_t mine = static_cast<uint32_t>(st.epoch) & imm::kEpochMask;
  for (uint32_t p = 0; p < s_.num_ranks; ++p) {
    if (p == s_.rank || !in_barrier_set(p, st.rail)) continue;
    const uint32_t e = epoch_in_[st.rail][2 * p + (st.target & 1)];
    if (e != mine) {
      fatal(anyepInvalidArgument, where(r) + ": " + (st.rail ? "rail " : "") + "BARRIER #" + std::to_string(st.target) +
                                      ": " + s_.hosts->name(p) + " entered it with epoch " + std::to_string(e) +
                                      " but this rank with epoch " + std::to_string(mine) +
                                      " (mod 2^16; mismatched barriers)");
      return false;
    }
  }
  return true;
}

bool ProxyThread::poll_transport(uint64_t now) {
  size_t nc = 0, ni = 0;
  if (int rc = ep_->poll(comps_.data(), comps_.size(), &nc, imms_.data(), imms_.size(), &ni)) {
    fatal(anyepTransportError, where(~0u) + ": poll failed (" + std::to_string(rc) + "): " + ep_->last_error());
    return false;
  }
  for (size_t i = 0; i < nc; ++i) {
    const transport::Completion& c = comps_[i];
    if (c.status) {
      fatal(anyepTransportError, where(~0u) + ": a write failed (" + std::to_string(c.status) + "): " + ep_->last_error());
      return false;
    }
    const uint64_t ring = c.context & 0xffff, slot = c.context >> 16;
    if (ring != kNoRing) --rings_[ring].outstanding;
    if (slot) staging_busy_[slot - 1] = 0;
  }
  for (size_t i = 0; i < ni; ++i) {
    const uint32_t src = imms_[i].src_rank, v = imms_[i].imm;
    if (src >= s_.num_ranks) {
      fatal(anyepTransportError, where(~0u) + ": immediate from unknown rank " + std::to_string(src));
      return false;
    }
    int rc = 0;
    switch (imm::kind(v)) {
      case imm::Kind::kWrite: rc = engine_.on_write(src, v, now); break;
      case imm::Kind::kSignal: {
        const uint32_t seq = imm::signal_seq(v);
        // The transport reports the immediate only after the record landed; copy it out now so
        // the slot can be handed back to the sender.
        const SignalRecord rec = signal_area_[static_cast<size_t>(src) * s_.cfg.signal_slots + (seq & (s_.cfg.signal_slots - 1))];
        if (rec.seq != seq) {
          fatal(anyepTransportError, where(~0u) + ": signal record " + std::to_string(seq) + " from rank " +
                                         std::to_string(src) + " holds sequence " + std::to_string(rec.seq) +
                                         " (slot overwritten or lost)");
          return false;
        }
        rc = engine_.on_signal(src, rec, now);
        // Records may be read out of order (unordered transports): a slot is handed back only
        // when every earlier slot of this sender was read too, so credits free a contiguous run.
        uint8_t* read = &slot_read_[static_cast<size_t>(src) * s_.cfg.signal_slots];
        read[seq & (s_.cfg.signal_slots - 1)] = 1;
        for (uint32_t& n = next_unread_[src]; read[n & (s_.cfg.signal_slots - 1)]; n = (n + 1) & imm::kSeqMask) {
          read[n & (s_.cfg.signal_slots - 1)] = 0;
          ++freed_[src];
        }
        if (freed_[src] >= s_.cfg.signal_slots / 4) {
          credit_owed_[src] += freed_[src];
          freed_[src] = 0;
          credits_pending_ = true;
        }
        break;
      }
      case imm::Kind::kBarrier:
        if (!imm::barrier_reserved_clear(v)) {
          fatal(anyepTransportError, where(~0u) + ": malformed barrier immediate from rank " + std::to_string(src));
          return false;
        }
      {
        const bool rail = imm::barrier_rail(v);
        if (!in_barrier_set(src, rail) || (!rail && !s_.hosts->leader())) {
          fatal(anyepTransportError, where(~0u) + ": " + (rail ? "rail " : "") + "barrier arrival from " +
                                         s_.hosts->name(src) + ", which is not a member of this rank's barrier " +
                                         "(ranks disagree on the host layout?)");
          return false;
        }
        const uint32_t n = ++barriers_in_[rail][src];
        epoch_in_[rail][2 * src + (n & 1)] = static_cast<uint16_t>(imm::barrier_epoch(v));
        break;
      }
      case imm::Kind::kCredit:
        sig_credit_[src] += imm::credit_slots(v);
        if (sig_credit_[src] > s_.cfg.signal_slots) {
          fatal(anyepTransportError, where(~0u) + ": rank " + std::to_string(src) + " returned more signal credits than exist");
          return false;
        }
        break;
    }
    if (rc) {
      fatal(status_of(rc), engine_.last_error());
      return false;
    }
  }
  return nc + ni > 0;
}

void ProxyThread::send_credits() {
  credits_pending_ = false;
  for (uint32_t p = 0; p < s_.num_ranks; ++p) {
    if (!credit_owed_[p]) continue;
    const int rc = ep_->post_imm(p, imm::make_credit(credit_owed_[p]), ctx(kNoRing));
    if (rc == -EAGAIN) {
      credits_pending_ = true;
      return;
    }
    if (rc) {
      fatal(anyepTransportError, where(~0u) + ": returning signal credits to rank " + std::to_string(p) + " failed: " + ep_->last_error());
      return;
    }
    credit_owed_[p] = 0;
  }
}

std::string ProxyThread::barrier_missing(const RingState& st) const {
  const HostLayout& L = *s_.hosts;
  std::string m;
  uint32_t shown = 0;
  if (st.outstanding) m = " (own ring still has " + std::to_string(st.outstanding) + " incomplete writes)";
  const bool local = !st.rail && s_.shm;
  if (local && st.phase >= 1) {
    // Ranks of this host that have not stored their arrival (any local rank can read the words).
    for (uint32_t j = 0; j < L.local_size() && shown < 16; ++j) {
      const uint32_t c = s_.shm->arrival(s_.index, j).count.load(std::memory_order_acquire);
      const uint32_t p = L.local_ranks[j];
      if (c < st.target)
        m += " rank " + std::to_string(p) + " (host " + std::to_string(L.host) + ", entered " + std::to_string(c) + ")", ++shown;
    }
    if (!L.leader()) {
      if (!shown)
        m += " another host: every rank of host " + std::to_string(L.host) + " entered; its leader rank " +
             std::to_string(L.leader_of_host[L.host]) + " waits for the other hosts' leaders";
      return m;
    }
    if (shown || st.phase < 2) return m;
  } else if (local) {
    return m;
  }
  for (uint32_t p = 0; p < s_.num_ranks && shown < 16; ++p)
    if (p != s_.rank && in_barrier_set(p, st.rail) && barriers_in_[st.rail][p] < st.target) {
      const std::string n = std::to_string(barriers_in_[st.rail][p]);
      m += local ? " host " + std::to_string(L.host_of[p]) + " (its leader rank " + std::to_string(p) + " entered " + n + ")"
                 : " rank " + std::to_string(p) + " (host " + std::to_string(L.host_of[p]) + ", entered " + n + ")";
      ++shown;
    }
  return m;
}

void ProxyThread::check_timeouts(uint64_t now) {
  if (int rc = engine_.check_timeouts(now)) {
    fatal(status_of(rc), engine_.last_error());
    return;
  }
  const std::string limit = std::to_string(s_.timeout_ns / 1000000) + " ms";
  for (uint32_t r = 0; r < rings_.size(); ++r) {
    RingState& st = rings_[r];
    cur_index_ = st.ring->tail();
    if (st.retry_since && now - st.retry_since > s_.timeout_ns) {
      fatal(anyepTimeout, where(r) + ": could not post for more than " + limit +
                              " (transport backpressure, no free staging slot, or a peer returns no signal credits)");
      return;
    }
    if (st.block == Block::kNone || now - st.since_ns <= s_.timeout_ns) continue;
    if (st.block == Block::kQuiet) {
      std::string what;
      for (uint64_t b = st.quiet_mask; b; b &= b - 1) {
        const RingState& o = rings_[__builtin_ctzll(b)];
        if (o.outstanding) what += " ring " + std::to_string(o.ring->ring_id()) + ": " + std::to_string(o.outstanding) + " not complete;";
      }
      fatal(anyepTimeout, where(r) + ": QUIET waited more than " + limit + " for remote completion of earlier commands:" + what);
    } else {
      fatal(anyepTimeout, where(r) + ": " + (st.rail ? "rail " : "") + "BARRIER #" + std::to_string(st.target) +
                              " (epoch " + std::to_string(st.epoch) + ") waited more than " + limit +
                              "; not entered by:" + barrier_missing(st));
    }
    return;
  }
}

}  // namespace anyep::proxy
