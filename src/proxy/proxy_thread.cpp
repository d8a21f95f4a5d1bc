#include "proxy/proxy_thread.h"

#include <sched.h>

#include <cstring>

#include "common/error.h"

namespace anyep::proxy {

using channel::Op;
using channel::RingConsumer;
using channel::TransferCmd;
namespace cmd = channel::cmd;

namespace {
anyep_status_t status_of(int rc) {
  switch (rc) {
    case -ETIMEDOUT:
      return ANYEP_ERR_TIMEOUT;
    case -EINVAL:
      return ANYEP_ERR_INVALID_ARGUMENT;
    case -EPROTO:
      return ANYEP_ERR_TRANSPORT;
    default:
      return ANYEP_ERR_INTERNAL;
  }
}

SignalLinkConfig link_config(const ThreadSetup& s) {
  return SignalLinkConfig{s.rank, s.num_ranks, s.cfg.signal_slots, s.cfg.staging_slots};
}

// Checked before anything is registered on the endpoint.
const ThreadSetup& checked(const ThreadSetup& s, size_t num_rings) {
  if (num_rings > 64)
    throw InvalidArgument("proxy thread " + std::to_string(s.index) + ": " + std::to_string(num_rings) +
                          " rings; at most 64 per thread (use more threads)");
  SignalLink::check(link_config(s));
  if (s.cfg.batch == 0) throw InvalidArgument("proxy: staging_slots and batch must be >= 1");
  if (!s.hosts || s.hosts->host_of.size() != s.num_ranks || s.hosts->rank != s.rank)
    throw InternalError("proxy thread: no host layout");
  return s;
}

// The symmetric regions get ids 0..k-1 on every rank; returns k (the signal link's first id).
transport::MrId register_regions(transport::Transport& ep, const SymmetricMemory& sym) {
  for (uint32_t k = 0; k < sym.regions().size(); ++k) {
    const Region& r = sym.regions()[k];
    if (ep.register_memory(r.base, r.length, r.kind) != k)
      throw InternalError("proxy: transport assigned an unexpected id to region '" + r.name + "'");
  }
  return static_cast<transport::MrId>(sym.regions().size());
}

}  // namespace

ProxyThread::ProxyThread(const ThreadSetup& s, std::unique_ptr<transport::Transport> ep, const SymmetricMemory& sym,
                         std::vector<RingConsumer*> rings, AsyncError& err)
    : s_(checked(s, rings.size())),
      ep_(std::move(ep)),
      sym_(sym),
      err_(err),
      engine_(s.engine),
      link_(link_config(s), *ep_, register_regions(*ep_, sym)),
      barrier_(*s.hosts, s.shm, s.index, *ep_) {
  for (RingConsumer* r : rings) {
    rings_.emplace_back();
    rings_.back().ring = r;
  }
  if (s.cfg.drop_failed_peers && !s.dropped) throw InternalError("proxy thread: elastic mode without a drop list");
  gone_.assign(s.num_ranks, 0);
  send_groups_.resize(static_cast<size_t>(s.num_ranks) * s.cfg.num_tags);
  if (s.native) {
    // Peers add into our counters: one more registration, the same id on every rank.
    counters_mr_ = ep_->register_memory(
        s.engine.counters, static_cast<size_t>(s.engine.num_counters) * sizeof(uint64_t), transport::MemKind::kHost);
    if (counters_mr_ != link_.staging_mr() + 1)
      throw InternalError("proxy: transport assigned an unexpected id to the signal counters");
    native_groups_.resize(static_cast<size_t>(s.num_ranks) * s.cfg.num_tags);
  }
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

void ProxyThread::fatal(anyep_status_t st, const std::string& msg) {
  err_.set(st, msg);
  failed_ = true;
}

bool ProxyThread::gone(uint32_t p) {
  if (!s_.cfg.drop_failed_peers || p >= s_.num_ranks) return false;
  if (gone_[p]) return true;
  if (!s_.dropped->has(p)) return false;
  forget_peer(p);  // another thread dropped it
  return true;
}

bool ProxyThread::drop_peer(uint32_t p, const std::string& why) {
  if (!s_.cfg.drop_failed_peers || p >= s_.num_ranks || p == s_.rank) return false;
  s_.dropped->drop(p, why);
  if (!gone_[p]) forget_peer(p);
  return true;
}

void ProxyThread::forget_peer(uint32_t p) {
  gone_[p] = 1;
  engine_.drop_peer(p);
  link_.drop_peer(p);
}

ProxyThread::Step ProxyThread::reject(uint32_t r, const TransferCmd& c, const std::string& why) {
  // The command is retired without reaching the NIC; the host API raises the error.
  err_.set(ANYEP_ERR_INVALID_ARGUMENT,
           where(r) + ": rejected command (lo=" + std::to_string(c.lo) + " hi=" + std::to_string(c.hi) + "): " + why);
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
    if (link_.credits_pending() && !failed_) {
      uint32_t peer = ~0u;
      if (link_.send_credits(&peer)) {
        const std::string msg = where(~0u) + ": " + link_.last_error();
        if (!drop_peer(peer, msg)) fatal(ANYEP_ERR_TRANSPORT, msg);
      }
    }
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
  stats_.dropped.store(local_.dropped, std::memory_order_relaxed);
  stats_.signals_native.store(local_.signals_native, std::memory_order_relaxed);
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
    if (s_.native) ++native_groups_[static_cast<size_t>(w.dst_rank) * s_.cfg.num_tags + wq_tag_[i]].posted;
    local_.bytes += w.length;
  }
  rings_[r].outstanding += posted;
  local_.writes += posted;
  // Not all went out: the loop polls completions, then retries the rest (or the error stops it).
  // The contract names w[posted] as the write that failed; a backend that breaks it must not make
  // this read past the batch.
  if (rc) *stop = post_result(r, rc, "WRITE", wq_[posted < n ? posted : n - 1].dst_rank);
  if (rc && *stop == Step::kDropped) {
    // The failed write is retired unsent; the ones after it are read from the ring again.
    *stop = Step::kDone;
    return static_cast<uint32_t>(posted < n ? posted + 1 : posted);
  }
  return static_cast<uint32_t>(posted);
}

ProxyThread::Step ProxyThread::execute(uint32_t r, const TransferCmd& c, uint64_t now) {
  switch (cmd_op(c)) {
    case Op::kNop:
      return Step::kDone;
    case Op::kWrite:
      return Step::kFailed;  // never here: service_ring builds and posts WRITEs in batches
    case Op::kSignal:
      return do_signal(r, c);
    case Op::kQuiet:
      return start_quiet(r, c, now);
    case Op::kBarrier: {
      RingState& st = rings_[r];
      st.block = Block::kBarrier;
      st.since_ns = now;
      barrier_.begin(st.barrier, cmd_flags(c) & cmd::kBarrierRail, cmd_epoch(c));
      return Step::kBlocked;
    }
    default:
      return reject(
          r, c, "corrupted command: op " + std::to_string(static_cast<int>(cmd_op(c))) + " is not a valid operation");
  }
}

ProxyThread::Step ProxyThread::post_result(uint32_t r, int rc, const char* what, uint32_t dst) {
  if (rc == 0) return Step::kDone;
  if (rc == -EAGAIN) {
    local_.eagain += 1;
    rings_[r].retry_dst = dst;
    rings_[r].native_wait = false;
    return Step::kRetry;  // the loop polls completions (and credits), then retries the command
  }
  const std::string msg =
      where(r) + ": posting " + what + " to rank " + std::to_string(dst) + " failed: " + ep_->last_error();
  // -EINVAL is a bad descriptor (ours), not the peer's failure: never a reason to drop it.
  if (rc != -EINVAL && drop_peer(dst, msg)) {
    local_.dropped += 1;
    return Step::kDropped;
  }
  fatal(ANYEP_ERR_TRANSPORT, msg);
  return Step::kFailed;
}

bool ProxyThread::build_write(uint32_t r, const TransferCmd& c, uint32_t slot) {
  const uint32_t dst = cmd_dst_rank(c), tag = cmd_tag(c);
  const uint64_t len = cmd_length(c), so = cmd_src_offset(c), dof = cmd_dst_offset(c);
  if (gone(dst)) {  // elastic mode: retired unsent
    local_.dropped += 1;
    return false;
  }
  std::string why;
  RegionOffset src{0, 0}, dw{0, 0};
  if (dst >= s_.num_ranks) {
    why = "WRITE to rank " + std::to_string(dst) + ", but there are only " + std::to_string(s_.num_ranks) +
          " ranks (missing peer)";
  } else if (tag >= s_.cfg.num_tags) {
    why = "WRITE tag " + std::to_string(tag) + " >= num_tags " + std::to_string(s_.cfg.num_tags);
  } else if (s_.native && (cmd_flags(c) & cmd::kWriteSignal)) {
    // Its +1 would be a CPU add by the receiving proxy, which is not atomic against the NIC's adds
    // to the same word; a native add per write is a SIGNAL's job.
    why =
        "WRITE with kWriteSignal (+1 on arrival) is not supported with native atomics: push a SIGNAL with "
        "kFenceCount after the write instead";
  } else if (!sym_.translate(so, len, &src)) {
    why = "WRITE source [" + std::to_string(so) + ", +" + std::to_string(len) + ") is outside the symmetric memory (" +
          sym_.describe() + ")";
  } else if (!sym_.translate(dof, len, &dw)) {
    why = "WRITE destination [" + std::to_string(dof) + ", +" + std::to_string(len) + ") on rank " +
          std::to_string(dst) + " is outside the symmetric memory (" + sym_.describe() + ")";
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
  // Bypass: the receiver needs an immediate only to apply a piggybacked +1. Native atomics: never
  // (the receiver applies nothing; the sender counts the write's completion for its fences).
  w.has_imm = !s_.native && (!s_.bypass || plus_one);
  w.imm = imm::encode_write(tag, g.segment, plus_one);
  w.context = s_.native ? completion::make_native(r, tag, dst, false, false) : completion::make(r, 0, dst);
  wq_tag_[slot] = tag;
  return true;
}

ProxyThread::Step ProxyThread::do_signal(uint32_t r, const TransferCmd& c) {
  const uint32_t dst = cmd_dst_rank(c), tag = cmd_tag(c), counter = cmd_counter(c);
  const uint8_t flags = cmd_flags(c);
  if (dst >= s_.num_ranks)
    return reject(r, c,
                  "SIGNAL to rank " + std::to_string(dst) + ", but there are only " + std::to_string(s_.num_ranks) +
                      " ranks (missing peer)");
  if (gone(dst)) {  // elastic mode: retired unsent
    local_.dropped += 1;
    return Step::kDone;
  }
  if (tag >= s_.cfg.num_tags)
    return reject(r, c, "SIGNAL tag " + std::to_string(tag) + " >= num_tags " + std::to_string(s_.cfg.num_tags));
  if (counter >= s_.engine.num_counters)
    return reject(
        r, c,
        "SIGNAL counter " + std::to_string(counter) + " >= num_counters " + std::to_string(s_.engine.num_counters));
  if ((flags & cmd::kFenceCount) && (flags & cmd::kFenceOrdered))
    return reject(r, c, "SIGNAL asks for both the count fence and the ordered fence");
  SendGroup& g = send_groups_[static_cast<size_t>(dst) * s_.cfg.num_tags + tag];
  const Fence fence = (flags & cmd::kFenceCount)     ? Fence::kCount
                      : (flags & cmd::kFenceOrdered) ? Fence::kOrdered
                                                     : Fence::kNone;
  SignalRecord rec{};  // seq: the link's
  rec.counter = counter;
  rec.value = cmd_signal_value(c);
  rec.tag = static_cast<uint16_t>(tag);
  rec.fence = static_cast<uint8_t>(fence);
  rec.segment = g.segment;
  rec.fence_count = fence == Fence::kOrdered ? g.writes : cmd_fence_count(c);
  if (s_.native) return native_signal(r, dst, rec);
  // -EAGAIN also when no credit or staging slot is free: retried after polling completions and credits.
  if (const Step st = post_result(r, link_.send(dst, rec, r), "SIGNAL", dst); st != Step::kDone)
    return st == Step::kDropped ? Step::kDone : st;
  if (fence == Fence::kOrdered) {
    ++g.segment;  // uint8_t: wraps mod 256 with the wire field
    g.writes = 0;
  }
  ++rings_[r].outstanding;
  local_.signals_sent += 1;
  return Step::kDone;
}

ProxyThread::Step ProxyThread::native_signal(uint32_t r, uint32_t dst, const SignalRecord& rec) {
  NativeGroup& g = native_groups_[static_cast<size_t>(dst) * s_.cfg.num_tags + rec.tag];
  const Fence fence = static_cast<Fence>(rec.fence);
  // Memory ordering: the add is posted only after every write it vouches for completed here. The
  // proxy accepted native atomics only with placed_writes, so each such completion means the
  // bytes are in the target's memory; an add posted afterwards applies after them, and a consumer
  // that reads the counter with acquire then sees them. Nothing is claimed about writes not yet
  // complete: the signal waits at the head of its ring (bounded by the timeout) until they are.
  bool ready = true;
  uint32_t need = 0, have = 0;
  if (fence == Fence::kCount) {
    // LL: the mirror of the engine's count fence: N more writes of (dst, tag) complete than earlier
    // count signals consumed. A group has one round in flight (docs/proxy.md), so completed writes
    // beyond the consumed ones belong to this round, whichever ring of this thread posted them.
    have = g.completed - g.consumed;
    need = rec.fence_count;
    ready = have >= need;
  } else if (fence == Fence::kOrdered) {
    // HT: every write posted on (dst, tag) so far is complete — a superset of the writes before
    // this signal in ring order (the channel is fed from this ring, which waits here) — and the
    // previous ordered add of the channel is applied, so ordered signals apply in ring order as
    // the engine applies them.
    have = g.completed;
    need = g.posted;
    ready = have == need && g.adds == 0;
  }
  // kNone: unfenced, posted at once (it vouches for nothing).
  RingState& st = rings_[r];
  if (!ready) {
    st.native_wait = true;
    st.retry_dst = dst;
    st.wait_fence = rec.fence;
    st.wait_tag = rec.tag;
    st.wait_counter = rec.counter;
    st.wait_need = need;
    st.wait_have = have;
    st.wait_adds = g.adds;
    return Step::kRetry;  // retried after polling completions; the ring's retry clock bounds it
  }
  transport::AtomicAddDesc a;
  a.dst_rank = dst;
  a.remote_mr = counters_mr_;
  a.remote_offset = static_cast<uint64_t>(rec.counter) * sizeof(uint64_t);
  a.value = static_cast<uint64_t>(static_cast<int64_t>(rec.value));  // two's complement: a negative delta
  a.context = completion::make_native(r, rec.tag, dst, true, fence == Fence::kOrdered);
  if (const Step step = post_result(r, ep_->post_atomic_add(a), "SIGNAL (native atomic add)", dst); step != Step::kDone)
    return step == Step::kDropped ? Step::kDone : step;
  if (fence == Fence::kCount) g.consumed += rec.fence_count;
  if (fence == Fence::kOrdered) ++g.adds;
  ++st.outstanding;  // QUIET and BARRIER wait for the add to be applied (its completion)
  local_.signals_sent += 1;
  local_.signals_native += 1;
  return Step::kDone;
}

ProxyThread::Step ProxyThread::start_quiet(uint32_t r, const TransferCmd& c, uint64_t now) {
  uint64_t m = 1ull << r;
  for (uint64_t named = cmd_ring_mask(c); named; named &= named - 1) {
    const uint32_t id = static_cast<uint32_t>(__builtin_ctzll(named));
    const int lr = local_ring(id);
    if (lr < 0)
      return reject(r, c,
                    "QUIET names ring " + std::to_string(id) + ", which proxy thread " + std::to_string(s_.index) +
                        " does not own (a QUIET may only name rings of its thread)");
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

bool ProxyThread::try_finish(uint32_t r, uint64_t now) {
  RingState& st = rings_[r];
  if (st.block == Block::kQuiet) {
    for (uint64_t b = st.quiet_mask; b; b &= b - 1)
      if (rings_[__builtin_ctzll(b)].outstanding) return false;
    for (uint64_t b = st.quiet_mask & ~(1ull << r); b; b &= b - 1) --rings_[__builtin_ctzll(b)].frozen;
  } else if (const int rc = barrier_.advance(st.barrier, st.outstanding, completion::make(r)); rc <= 0) {
    if (rc < 0) fatal(status_of(rc), where(r) + ": " + barrier_.last_error());
    return false;
  }
  st.block = Block::kNone;
  st.ring->pop(1);
  local_.commands += 1;
  (void)now;
  return true;
}

bool ProxyThread::poll_transport(uint64_t now) {
  size_t nc = 0, ni = 0;
  if (int rc = ep_->poll(comps_.data(), comps_.size(), &nc, imms_.data(), imms_.size(), &ni)) {
    fatal(ANYEP_ERR_TRANSPORT, where(~0u) + ": poll failed (" + std::to_string(rc) + "): " + ep_->last_error());
    return false;
  }
  for (size_t i = 0; i < nc; ++i) {
    const transport::Completion& c = comps_[i];
    const bool native = s_.native && completion::native(c.context);
    if (c.status) {
      const int64_t peer = completion::peer(c.context);
      const std::string msg =
          where(~0u) + ": " +
          (native && completion::native_add(c.context) ? "an atomic add (native SIGNAL)" : "a write") +
          (peer >= 0 ? " to rank " + std::to_string(peer) : std::string()) + " failed (" + std::to_string(c.status) +
          "): " +
          (ep_->last_error().empty()
               ? std::string(std::strerror(static_cast<int>(-c.status))) + " (the transport said no more)"
               : ep_->last_error());
      if (peer < 0 || !drop_peer(static_cast<uint32_t>(peer), msg)) {
        fatal(ANYEP_ERR_TRANSPORT, msg);
        return false;
      }
      local_.dropped += 1;  // its ring and staging slot are released below, as for any completion
    }
    if (const uint64_t ring = completion::ring(c.context); ring != completion::kNoRing) --rings_[ring].outstanding;
    if (native) {
      // (A failed one counts as complete too: its peer was dropped, or the proxy stops.)
      NativeGroup& g = native_groups_[static_cast<size_t>(completion::peer(c.context)) * s_.cfg.num_tags +
                                      completion::native_tag(c.context)];
      if (!completion::native_add(c.context))
        ++g.completed;  // placed at the target (placed_writes): the fences above may now let adds go
      else if (completion::native_ordered(c.context))
        --g.adds;  // applied at the target (the interface's contract for an add's completion)
    } else {
      link_.on_complete(c.context);
    }
  }
  for (size_t i = 0; i < ni; ++i) {
    const uint32_t src = imms_[i].src_rank, v = imms_[i].imm;
    if (src >= s_.num_ranks) {
      fatal(ANYEP_ERR_TRANSPORT, where(~0u) + ": immediate from unknown rank " + std::to_string(src));
      return false;
    }
    if (gone(src)) continue;  // elastic mode: a dropped peer's late traffic is discarded
    int rc = 0;
    switch (imm::kind(v)) {
      case imm::Kind::kWrite:
        rc = engine_.on_write(src, v, now);
        break;
      case imm::Kind::kSignal: {
        SignalRecord rec;
        if (link_.receive(src, v, &rec)) {
          fatal(ANYEP_ERR_TRANSPORT, where(~0u) + ": " + link_.last_error());
          return false;
        }
        rc = engine_.on_signal(src, rec, now);
        break;
      }
      case imm::Kind::kBarrier:
        if (barrier_.on_arrival(src, v)) {
          fatal(ANYEP_ERR_TRANSPORT, where(~0u) + ": " + barrier_.last_error());
          return false;
        }
        break;
      case imm::Kind::kCredit:
        if (link_.on_credit(src, v)) {
          fatal(ANYEP_ERR_TRANSPORT, where(~0u) + ": " + link_.last_error());
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

void ProxyThread::check_timeouts(uint64_t now) {
  if (s_.cfg.drop_failed_peers)
    for (uint32_t p = 0; p < s_.num_ranks; ++p) gone(p);  // discard what other threads' drops left held here
  if (int rc = engine_.check_timeouts(now)) {
    // The held signal's data never came: in elastic mode its sender is dropped (its held signals
    // are discarded, so the kernel waiting on them times out and masks it).
    if (rc != -ETIMEDOUT || !drop_peer(engine_.timed_out_src(), engine_.last_error())) {
      fatal(status_of(rc), engine_.last_error());
      return;
    }
  }
  const std::string limit = std::to_string(s_.timeout_ns / 1000000) + " ms";
  for (uint32_t r = 0; r < rings_.size(); ++r) {
    RingState& st = rings_[r];
    cur_index_ = st.ring->tail();
    if (st.retry_since && now - st.retry_since > s_.timeout_ns) {
      if (st.native_wait) {
        // The writes it vouches for never completed: their peer (the signal's) is not answering.
        std::string what;
        if (st.wait_fence == static_cast<uint8_t>(Fence::kCount))
          what = "count-fenced (LL): " + std::to_string(st.wait_have) + " of its " + std::to_string(st.wait_need) +
                 " writes complete";
        else
          what = "ordered (HT): " + std::to_string(st.wait_have) + " of the " + std::to_string(st.wait_need) +
                 " writes posted on that (rank, tag) complete, " + std::to_string(st.wait_adds) +
                 " earlier ordered adds not yet applied";
        const std::string msg = where(r) + ": native SIGNAL to rank " + std::to_string(st.retry_dst) + " (tag " +
                                std::to_string(st.wait_tag) + ", counter " + std::to_string(st.wait_counter) +
                                ") waited more than " + limit + " for the writes it is fenced after: " + what;
        if (drop_peer(st.retry_dst, msg)) {
          st.retry_since = 0;  // retired unsent on the next pass (its peer is gone)
          continue;
        }
        fatal(ANYEP_ERR_TIMEOUT, msg);
        return;
      }
      if (drop_peer(st.retry_dst, where(r) + ": could not post to rank " + std::to_string(st.retry_dst) +
                                      " for more than " + limit)) {
        st.retry_since = 0;  // the command at the head is retired unsent on the next pass
        continue;
      }
      fatal(ANYEP_ERR_TIMEOUT,
            where(r) + ": could not post for more than " + limit +
                " (transport backpressure, no free staging slot, or a peer returns no signal credits)");
      return;
    }
    if (st.block == Block::kNone || now - st.since_ns <= s_.timeout_ns) continue;
    if (st.block == Block::kQuiet) {
      std::string what;
      for (uint64_t b = st.quiet_mask; b; b &= b - 1) {
        const RingState& o = rings_[__builtin_ctzll(b)];
        if (o.outstanding)
          what +=
              " ring " + std::to_string(o.ring->ring_id()) + ": " + std::to_string(o.outstanding) + " not complete;";
      }
      fatal(ANYEP_ERR_TIMEOUT,
            where(r) + ": QUIET waited more than " + limit + " for remote completion of earlier commands:" + what);
    } else {
      const BarrierState& b = st.barrier;
      fatal(ANYEP_ERR_TIMEOUT, where(r) + ": " + (b.rail ? "rail " : "") + "BARRIER #" + std::to_string(b.target) +
                                   " (epoch " + std::to_string(b.epoch) + ") waited more than " + limit +
                                   "; not entered by:" + barrier_.missing(b, st.outstanding));
    }
    return;
  }
}

}  // namespace anyep::proxy
