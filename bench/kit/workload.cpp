#include "bench/kit/workload.h"

#include <sched.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "kernels/ht/internode_protocol.h"

namespace anyep::benchkit {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t key(uint64_t seed, uint64_t kind, uint64_t s, uint64_t q, uint64_t r, uint64_t i) {
  return mix(mix(mix(mix(mix(seed ^ kind) ^ s) ^ q) ^ r) ^ i);
}
enum : uint64_t { kLL = 1, kHT = 2, kPick = 3 };

void fill(uint8_t* dst, uint32_t bytes, uint64_t k) {
  for (uint32_t w = 0; w < bytes / 8; ++w) {
    const uint64_t v = mix(k + w);
    std::memcpy(dst + 8 * w, &v, 8);
  }
}
// Index of the first byte that differs from the pattern, or -1.
int64_t mismatch(const uint8_t* got, uint32_t bytes, uint64_t k) {
  for (uint32_t w = 0; w < bytes / 8; ++w) {
    const uint64_t v = mix(k + w);
    if (std::memcmp(got + 8 * w, &v, 8) != 0) return 8 * w;
  }
  return -1;
}

// Thrown by a thread that stopped because another one failed; never the error reported.
struct Stopped {};

}  // namespace

std::exception_ptr first_by_precedence(const std::vector<std::exception_ptr>& errs) {
  std::exception_ptr first;
  for (const auto& e : errs) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const DataViolation&) {
      return e;
    } catch (...) {
      if (!first) first = e;
    }
  }
  return first;
}

// Offsets and sizes; the one place the workload's buffer layout is written down (see header).
struct StreamWorkload::Geometry {
  const WorkloadConfig& c;
  uint64_t ll_area() const { return 2ull * c.max_tokens * c.token_max; }
  uint64_t stream() const { return ll_area() + uint64_t(c.ht_slots) * c.chunk_max; }
  uint64_t recv(uint32_t s, uint32_t q) const { return (uint64_t(s) * c.producers + q) * stream(); }
  uint64_t send(uint32_t q) const { return (uint64_t(c.ranks) * c.producers + q) * stream(); }
  uint64_t ll(uint64_t base, uint32_t p, uint32_t i) const {
    return base + (uint64_t(p) * c.max_tokens + i) * c.token_max;
  }
  uint64_t ht(uint64_t base, uint32_t slot) const { return base + ll_area() + uint64_t(slot) * c.chunk_max; }
  uint32_t ctr_ll(uint32_t s, uint32_t q, uint32_t p) const { return 3 * (s * c.producers + q) + p; }
  uint32_t ctr_tail(uint32_t s, uint32_t q) const { return 3 * (s * c.producers + q) + 2; }
  uint32_t ctr_ack(uint32_t q) const { return 3 * c.ranks * c.producers + 2 * q; }
  uint32_t ctr_head(uint32_t q) const { return 3 * c.ranks * c.producers + 2 * q + 1; }
  // Round r of LL stream (s, q): token count and sizes.
  uint32_t tokens(uint32_t s, uint32_t q, uint32_t r) const {
    return static_cast<uint32_t>(key(c.seed, kLL, s, q, r, ~0ull) % (c.max_tokens + 1));
  }
  uint32_t token_bytes(uint32_t s, uint32_t q, uint32_t r, uint32_t i) const {
    return 16 * (1 + static_cast<uint32_t>(key(c.seed, kLL, s, q, r, i) % (c.token_max / 16)));
  }
  uint64_t token_key(uint32_t s, uint32_t q, uint32_t r, uint32_t i) const {
    return key(c.seed, kLL, s, q, r, i) ^ 0xabc;
  }
  uint32_t chunk_bytes(uint32_t s, uint32_t q, uint32_t k) const {
    return 32 * (1 + static_cast<uint32_t>(key(c.seed, kHT, s, q, k, 0) % (c.chunk_max / 32)));
  }
  bool chunk_split(uint32_t s, uint32_t q, uint32_t k) const { return key(c.seed, kHT, s, q, k, 1) & 1; }
  uint64_t chunk_key(uint32_t s, uint32_t q, uint32_t k) const { return key(c.seed, kHT, s, q, k, 2); }
};

StreamWorkload::StreamWorkload(const WorkloadConfig& cfg, uint32_t rank, uint8_t* buffer, uint64_t* counters,
                               channel::Channel& channel, std::function<const uint8_t*(uint32_t)> peek)
    : cfg_(cfg), rank_(rank), buf_(buffer), counters_(counters), ch_(channel), peek_(std::move(peek)) {
  if (cfg.token_max < 16 || cfg.token_max % 16 || cfg.chunk_max < 32 || cfg.chunk_max % 32 || cfg.ht_slots == 0 ||
      cfg.producers == 0 || cfg.ranks == 0 || cfg.quiet_every == 0)
    throw InvalidArgument("workload: token_max must be a multiple of 16, chunk_max of 32; counts >= 1");
  if (channel.num_rings() < num_rings(cfg))
    throw InvalidArgument("workload: needs " + std::to_string(num_rings(cfg)) + " rings");
}

uint64_t StreamWorkload::buffer_bytes(const WorkloadConfig& c) {
  Geometry g{c};
  return g.send(c.producers);
}
uint32_t StreamWorkload::num_counters(const WorkloadConfig& c) { return 3 * c.ranks * c.producers + 2 * c.producers; }
uint32_t StreamWorkload::dest(const WorkloadConfig& c, uint32_t src, uint32_t q) {
  return static_cast<uint32_t>(key(c.seed, kPick, src, q, 0, 0) % c.ranks);
}

void StreamWorkload::violation(const std::string& msg) const {
  throw DataViolation("workload rank " + std::to_string(rank_) + " (seed " + std::to_string(cfg_.seed) + "): " + msg);
}

void StreamWorkload::push(const channel::RingHandle& h, const channel::TransferCmd& c, const char* what) {
  if (h.push(c) == channel::kPushFailed) {
    if (on_error_) on_error_();
    ch_.check_errors();
    if (stop_.load(std::memory_order_relaxed)) throw Stopped{};
    throw InternalError("workload rank " + std::to_string(rank_) + ": push of " + what + " to ring " +
                        std::to_string(h.ring_id) + " failed");
  }
}

void StreamWorkload::wait_counter(uint32_t idx, uint64_t want, const char* what, uint32_t q) {
  const uint64_t start = port::now_ns(), limit = static_cast<uint64_t>(cfg_.timeout_s * 1e9);
  for (uint32_t spins = 0; port::load_acquire_system(&counters_[idx]) < want; ++spins) {
    if ((spins & 1023) == 0) {
      if (stop_.load(std::memory_order_relaxed)) throw Stopped{};
      if (on_error_) on_error_();
      if (port::now_ns() - start > limit)
        throw TimeoutError("workload rank " + std::to_string(rank_) + " producer " + std::to_string(q) + ": " + what +
                           " counter " + std::to_string(idx) + " stayed at " +
                           std::to_string(port::load_acquire_system(&counters_[idx])) + " < " + std::to_string(want) +
                           " for " + std::to_string(cfg_.timeout_s) + " s");
    }
    sched_yield();
  }
}

void StreamWorkload::producer(uint32_t q, WorkloadResult& res) {
  const Geometry g{cfg_};
  const channel::RingHandle h = ch_.producer(q);
  const uint32_t s = rank_, d = dest(cfg_, s, q);
  const uint32_t Q = cfg_.producers, rounds = cfg_.ll_rounds, chunks = cfg_.ht_chunks, S = cfg_.ht_slots;
  uint32_t r = 0, k = 0, ops = 0;
  uint64_t pick = key(cfg_.seed, kPick, s, q, 1, 0);
  auto quiet = [&] {
    const uint64_t t0 = port::now_ns();
    const uint64_t idx = h.push(channel::make_quiet());
    if (idx == channel::kPushFailed || !h.wait_done(idx)) {
      if (on_error_) on_error_();
      if (stop_.load(std::memory_order_relaxed)) throw Stopped{};
      throw InternalError("workload rank " + std::to_string(rank_) + ": QUIET on ring " + std::to_string(q) +
                          " did not complete");
    }
    res.quiet_ns.push_back(port::now_ns() - t0);
    ++res.commands;
    const uint8_t* remote = peek_ ? peek_(d) : nullptr;
    if (!remote) return;
    // Everything pushed before the QUIET is remotely complete: the last LL round and HT chunk
    // (not overwritten before their acks) must already be at the destination.
    if (r > 0)
      for (uint32_t i = 0, n = g.tokens(s, q, r - 1); i < n; ++i)
        if (int64_t b = mismatch(remote + g.ll(g.recv(s, q), (r - 1) & 1, i), g.token_bytes(s, q, r - 1, i),
                                 g.token_key(s, q, r - 1, i));
            b >= 0)
          violation("QUIET retired but LL round " + std::to_string(r - 1) + " token " + std::to_string(i) + " byte " +
                    std::to_string(b) + " is not at rank " + std::to_string(d));
    if (k > 0)
      if (int64_t b =
              mismatch(remote + g.ht(g.recv(s, q), (k - 1) % S), g.chunk_bytes(s, q, k - 1), g.chunk_key(s, q, k - 1));
          b >= 0)
        violation("QUIET retired but HT chunk " + std::to_string(k - 1) + " byte " + std::to_string(b) +
                  " is not at rank " + std::to_string(d));
  };
  while (r < rounds || k < chunks) {
    pick = mix(pick);
    if (r < rounds && (k >= chunks || (pick & 1))) {
      const uint32_t p = r & 1, tag = 2 * q + p;
      if (r >= 2 && !cfg_.refill_before_ack)
        wait_counter(g.ctr_ack(q), r - 1, "LL ack", q);  // parity buffer of round r-2 is free
      const uint32_t n = g.tokens(s, q, r);
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t bytes = g.token_bytes(s, q, r, i);
        const uint64_t so = g.ll(g.send(q), p, i);
        fill(buf_ + so, bytes, g.token_key(s, q, r, i));
        push(h, channel::make_write(d, so, g.ll(g.recv(s, q), p, i), bytes, tag), "LL token");
        res.payload_bytes += bytes;
      }
      const uint64_t t0 = port::now_ns();
      push(h, channel::make_signal(d, g.ctr_ll(s, q, p), 1, channel::cmd::kFenceCount, tag, n), "LL count signal");
      res.commands += n + 1;
      ++r;
      if (r % 8 == 0) {  // sample the round trip: signal -> remote check -> ack
        wait_counter(g.ctr_ack(q), r, "LL ack", q);
        res.ll_round_trip_ns.push_back(port::now_ns() - t0);
      }
    } else {
      const ht::internode::ChunkRing ring{S};
      const uint32_t slot = ring.slot(k), tag = 2 * Q + q;
      if (!ring.may_write(k, 0))  // slot k-S must be consumed: wait for the receiver's credits
        wait_counter(g.ctr_head(q), ring.freed_needed(k), "HT head", q);
      const uint32_t bytes = g.chunk_bytes(s, q, k);
      const uint64_t so = g.ht(g.send(q), slot), dof = g.ht(g.recv(s, q), slot);
      fill(buf_ + so, bytes, g.chunk_key(s, q, k));
      if (g.chunk_split(s, q, k)) {
        push(h, channel::make_write(d, so, dof, bytes / 2, tag), "HT chunk");
        push(h, channel::make_write(d, so + bytes / 2, dof + bytes / 2, bytes / 2, tag), "HT chunk");
        res.commands += 2;
      } else {
        push(h, channel::make_write(d, so, dof, bytes, tag), "HT chunk");
        res.commands += 1;
      }
      res.payload_bytes += bytes;
      push(h, ht::internode::tail_signal(d, g.ctr_tail(s, q), tag, !cfg_.ht_unfenced_tail), "HT tail signal");
      ++res.commands;
      ++k;
    }
    if (++ops % cfg_.quiet_every == 0) quiet();
  }
  quiet();
}

void StreamWorkload::observer(WorkloadResult& res) {
  const Geometry g{cfg_};
  const channel::RingHandle ctl = ch_.producer(cfg_.producers);
  const uint32_t rounds = cfg_.ll_rounds, chunks = cfg_.ht_chunks, S = cfg_.ht_slots;
  struct Stream {
    uint32_t s, q, next_ll = 0, next_ht = 0;
  };
  std::vector<Stream> streams;
  for (uint32_t s = 0; s < cfg_.ranks; ++s)
    for (uint32_t q = 0; q < cfg_.producers; ++q)
      if (dest(cfg_, s, q) == rank_) streams.push_back({s, q});
  const uint64_t limit = static_cast<uint64_t>(cfg_.timeout_s * 1e9);
  uint64_t last_progress = port::now_ns();
  for (size_t done = 0; done < streams.size();) {
    bool progress = false;
    done = 0;
    for (Stream& st : streams) {
      const uint32_t s = st.s, q = st.q;
      while (st.next_ll < rounds) {  // LL rounds, in order
        const uint32_t r = st.next_ll, p = r & 1;
        const uint64_t c = port::load_acquire_system(&counters_[g.ctr_ll(s, q, p)]);
        if (c > r / 2 + 1)
          violation("LL counter of (src " + std::to_string(s) + ", producer " + std::to_string(q) + ", parity " +
                    std::to_string(p) + ") is " + std::to_string(c) + " before round " + std::to_string(r) +
                    " was checked: a signal was duplicated");
        if (c < r / 2 + 1) break;
        for (uint32_t i = 0, n = g.tokens(s, q, r); i < n; ++i)
          if (int64_t b = mismatch(buf_ + g.ll(g.recv(s, q), p, i), g.token_bytes(s, q, r, i), g.token_key(s, q, r, i));
              b >= 0)
            violation("LL count signal of (src " + std::to_string(s) + ", producer " + std::to_string(q) + ") round " +
                      std::to_string(r) + " observed, but token " + std::to_string(i) + " byte " + std::to_string(b) +
                      " is not in place");
        push(ctl, channel::make_signal(s, g.ctr_ack(q), 1), "LL ack");
        ++res.commands;
        ++st.next_ll;
        progress = true;
      }
      const uint64_t tail = port::load_acquire_system(&counters_[g.ctr_tail(s, q)]);
      if (!ht::internode::ChunkRing{S}.tail_possible(tail, st.next_ht, chunks))
        violation("HT tail of (src " + std::to_string(s) + ", producer " + std::to_string(q) + ") is " +
                  std::to_string(tail) + " with " + std::to_string(st.next_ht) +
                  " chunks consumed: a signal was duplicated");
      if (tail > st.next_ht) {
        for (uint32_t k = st.next_ht; k < tail; ++k)
          if (int64_t b = mismatch(buf_ + g.ht(g.recv(s, q), k % S), g.chunk_bytes(s, q, k), g.chunk_key(s, q, k));
              b >= 0)
            violation("HT tail of (src " + std::to_string(s) + ", producer " + std::to_string(q) + ") reached " +
                      std::to_string(tail) + ", but chunk " + std::to_string(k) + " byte " + std::to_string(b) +
                      " is not in place");
        push(ctl, ht::internode::credit_signal(s, g.ctr_head(q), static_cast<uint32_t>(tail - st.next_ht)), "HT head");
        ++res.commands;
        st.next_ht = static_cast<uint32_t>(tail);
        progress = true;
      }
      done += st.next_ll == rounds && st.next_ht == chunks;
    }
    const uint64_t now = port::now_ns();
    if (progress) {
      last_progress = now;
      continue;
    }
    if (stop_.load(std::memory_order_relaxed)) throw Stopped{};
    if (on_error_) on_error_();
    if (now - last_progress > limit) {
      std::string what;
      for (const Stream& st : streams)
        if (st.next_ll < rounds || st.next_ht < chunks)
          what += " (src " + std::to_string(st.s) + ", producer " + std::to_string(st.q) + "): LL round " +
                  std::to_string(st.next_ll) + "/" + std::to_string(rounds) + ", HT chunk " +
                  std::to_string(st.next_ht) + "/" + std::to_string(chunks) + ";";
      throw TimeoutError("workload rank " + std::to_string(rank_) + " observer: no progress for " +
                         std::to_string(cfg_.timeout_s) + " s; waiting for" + what);
    }
    sched_yield();
  }
}

void StreamWorkload::barrier(uint64_t epoch, bool rail) {
  const channel::RingHandle ctl = ch_.producer(cfg_.producers);
  const uint64_t idx = ctl.push(channel::make_barrier(rail, epoch));
  if (idx == channel::kPushFailed || !ctl.wait_done(idx)) {
    if (on_error_) on_error_();
    ch_.check_errors();
    throw InternalError("workload rank " + std::to_string(rank_) + ": barrier " + std::to_string(epoch) +
                        " did not complete");
  }
}

WorkloadResult StreamWorkload::run(const std::function<void()>& on_error) {
  on_error_ = on_error;
  stop_ = false;
  const Geometry g{cfg_};
  std::vector<WorkloadResult> parts(cfg_.producers + 1);
  // In the order the threads failed: a violation found after a timeout still wins.
  std::vector<std::exception_ptr> errs;
  std::mutex errs_mu;
  barrier(1);
  {
    std::vector<std::thread> th;
    for (uint32_t q = 0; q <= cfg_.producers; ++q)
      th.emplace_back([&, q] {
        try {
          if (q < cfg_.producers)
            producer(q, parts[q]);
          else
            observer(parts[q]);
        } catch (const Stopped&) {
          // another thread failed first; its error is the one reported
        } catch (...) {
          std::lock_guard<std::mutex> lk(errs_mu);
          errs.push_back(std::current_exception());
          stop_ = true;
        }
      });
    for (auto& t : th) t.join();
  }
  if (std::exception_ptr e = first_by_precedence(errs)) std::rethrow_exception(e);
  barrier(2);
  // Acks for this rank's producers may still be in flight: wait for the totals, then require them
  // exactly (no signal lost or duplicated).
  for (uint32_t q = 0; q < cfg_.producers; ++q) {
    wait_counter(g.ctr_ack(q), cfg_.ll_rounds, "final LL ack", q);
    wait_counter(g.ctr_head(q), cfg_.ht_chunks, "final HT head", q);
  }
  barrier(3);  // every rank is past its waits: no more traffic is owed to anyone
  auto expect = [&](uint32_t idx, uint64_t want, const std::string& what) {
    const uint64_t v = port::load_acquire_system(&counters_[idx]);
    if (v != want)
      violation(what + " counter " + std::to_string(idx) + " is " + std::to_string(v) + ", expected " +
                std::to_string(want));
  };
  for (uint32_t s = 0; s < cfg_.ranks; ++s)
    for (uint32_t q = 0; q < cfg_.producers; ++q) {
      const bool mine = dest(cfg_, s, q) == rank_;
      expect(g.ctr_ll(s, q, 0), mine ? (cfg_.ll_rounds + 1) / 2 : 0, "LL parity 0");
      expect(g.ctr_ll(s, q, 1), mine ? cfg_.ll_rounds / 2 : 0, "LL parity 1");
      expect(g.ctr_tail(s, q), mine ? cfg_.ht_chunks : 0, "HT tail");
    }
  for (uint32_t q = 0; q < cfg_.producers; ++q) {
    expect(g.ctr_ack(q), cfg_.ll_rounds, "LL ack");
    expect(g.ctr_head(q), cfg_.ht_chunks, "HT head");
  }
  WorkloadResult total;
  for (auto& p : parts) {
    total.commands += p.commands;
    total.payload_bytes += p.payload_bytes;
    total.ll_round_trip_ns.insert(total.ll_round_trip_ns.end(), p.ll_round_trip_ns.begin(), p.ll_round_trip_ns.end());
    total.quiet_ns.insert(total.quiet_ns.end(), p.quiet_ns.begin(), p.quiet_ns.end());
  }
  total.commands += 3;  // barriers
  return total;
}

}  // namespace anyep::benchkit
