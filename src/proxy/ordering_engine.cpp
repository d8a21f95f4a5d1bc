#include "proxy/ordering_engine.h"

#include <cerrno>

#include "common/error.h"

namespace anyep::proxy {

namespace {
const char* fence_name(uint8_t f) {
  switch (static_cast<Fence>(f)) {
    case Fence::kNone:
      return "unfenced";
    case Fence::kCount:
      return "count-fenced (LL)";
    case Fence::kOrdered:
      return "ordered (HT)";
  }
  return "?";
}
}  // namespace

OrderingEngine::OrderingEngine(const EngineConfig& cfg) : cfg_(cfg) {
  if (cfg.num_ranks == 0 || cfg.my_rank >= cfg.num_ranks)
    throw InvalidArgument("ordering engine: rank " + std::to_string(cfg.my_rank) + " of " +
                          std::to_string(cfg.num_ranks));
  if (cfg.num_tags == 0 || cfg.num_tags > imm::kMaxTags)
    throw InvalidArgument("ordering engine: num_tags must be 1.." + std::to_string(imm::kMaxTags) + " (got " +
                          std::to_string(cfg.num_tags) + ")");
  if (!cfg.counters || cfg.num_counters == 0) throw InvalidArgument("ordering engine: no counters");
  if (cfg.max_pending == 0) throw InvalidArgument("ordering engine: max_pending must be >= 1");
  groups_.resize(static_cast<size_t>(cfg.num_ranks) * cfg.num_tags);
  pool_.resize(cfg.max_pending);
  for (uint32_t i = 0; i < cfg.max_pending; ++i)
    pool_[i].next = i + 1 < cfg.max_pending ? int32_t(i + 1) : -1, pool_[i].used = false;
  free_ = 0;
}

int OrderingEngine::fail(int rc, const std::string& msg) {
  error_ = "rank " + std::to_string(cfg_.my_rank) + ": ordering engine: " + msg;
  return rc;
}

int OrderingEngine::add_to_counter(uint32_t src, uint32_t counter, int64_t value, uint32_t tag) {
  if (counter >= cfg_.num_counters)
    return fail(-EINVAL, "signal from peer " + std::to_string(src) + " (tag " + std::to_string(tag) +
                             ") names counter " + std::to_string(counter) + ", but only " +
                             std::to_string(cfg_.num_counters) + " exist");
  // Release: the data this signal vouches for became visible to this thread when the transport
  // reported it (poll acquires); a consumer's system-scope acquire load of the counter then sees
  // that data. Several proxy threads may add to one counter, hence an atomic add.
  __atomic_fetch_add(&cfg_.counters[counter], static_cast<uint64_t>(value), __ATOMIC_RELEASE);
  ++stats_.signals_applied;
  return 0;
}

int OrderingEngine::apply(uint32_t src, const SignalRecord& rec) {
  return add_to_counter(src, rec.counter, rec.value, rec.tag);
}

int OrderingEngine::on_write(uint32_t src, uint32_t v, uint64_t now_ns) {
  if (imm::kind(v) != imm::Kind::kWrite || !imm::write_reserved_clear(v))
    return fail(-EPROTO, "malformed write immediate " + std::to_string(v) + " from peer " + std::to_string(src));
  const uint32_t tag = imm::write_tag(v);
  if (src >= cfg_.num_ranks) return fail(-EINVAL, "write from unknown peer " + std::to_string(src));
  if (tag >= cfg_.num_tags)
    return fail(-EINVAL, "write from peer " + std::to_string(src) + " names tag " + std::to_string(tag) +
                             " (num_tags " + std::to_string(cfg_.num_tags) + ")");
  ++stats_.writes;
  // The piggybacked +1 vouches only for this write's own data, which is in place now.
  if (imm::write_plus_one(v))
    if (int rc = add_to_counter(src, tag, 1, tag)) return rc;
  if (cfg_.bypass) return 0;
  Group& g = group(src, tag);
  const uint32_t seg = imm::write_segment(v);
  const uint32_t ahead = (seg - g.next_segment) & (imm::kNumSegments - 1);
  if (ahead >= kWindow)
    return fail(-EPROTO, "write from peer " + std::to_string(src) + " on tag " + std::to_string(tag) +
                             " is for segment " + std::to_string(seg) + " while segment " +
                             std::to_string(g.next_segment) + " is still open: more than " + std::to_string(kWindow) +
                             " ordered signals in flight on one channel");
  ++g.landed;
  ++g.seg_landed[seg % kWindow];
  if (int rc = drain_count(src, tag, g)) return rc;
  return drain_ordered(src, tag, g);
}

int OrderingEngine::hold(uint32_t src, const SignalRecord& rec, uint64_t now_ns, int32_t* out) {
  if (free_ < 0)
    return fail(-ENOBUFS, "more than " + std::to_string(cfg_.max_pending) + " signals held at once (latest from peer " +
                              std::to_string(src) + ", tag " + std::to_string(rec.tag) +
                              "): raise max_pending or check that writes arrive");
  const int32_t i = free_;
  free_ = pool_[i].next;
  pool_[i] = Held{rec, src, -1, now_ns, true};
  ++held_;
  ++stats_.signals_held;
  *out = i;
  return 0;
}

void OrderingEngine::release(int32_t i) {
  pool_[i].used = false;
  pool_[i].next = free_;
  free_ = i;
  --held_;
}

int OrderingEngine::drain_count(uint32_t src, uint32_t tag, Group& g) {
  while (g.count_head >= 0) {
    Held& h = pool_[g.count_head];
    // Unsigned difference: both counts wrap at 2^32 together.
    if (g.landed - g.consumed < h.rec.fence_count) return 0;
    g.consumed += h.rec.fence_count;
    const int32_t i = g.count_head;
    g.count_head = h.next;
    if (g.count_head < 0) g.count_tail = -1;
    const SignalRecord rec = h.rec;
    release(i);
    if (int rc = apply(src, rec)) return rc;
  }
  return 0;
}

int OrderingEngine::drain_ordered(uint32_t src, uint32_t tag, Group& g) {
  for (bool progress = true; progress;) {
    progress = false;
    int32_t prev = -1;
    for (int32_t i = g.ordered; i >= 0; prev = i, i = pool_[i].next) {
      Held& h = pool_[i];
      if (h.rec.segment != g.next_segment) continue;
      const uint32_t landed = g.seg_landed[h.rec.segment % kWindow];
      if (landed < h.rec.fence_count) return 0;
      if (landed > h.rec.fence_count)
        return fail(-EPROTO, "peer " + std::to_string(src) + " tag " + std::to_string(tag) + " segment " +
                                 std::to_string(h.rec.segment) + ": " + std::to_string(landed) +
                                 " writes landed but its signal vouches for " + std::to_string(h.rec.fence_count));
      g.seg_landed[h.rec.segment % kWindow] = 0;
      ++g.next_segment;  // uint8_t: wraps mod 256 like the wire field
      (prev < 0 ? g.ordered : pool_[prev].next) = h.next;
      const SignalRecord rec = h.rec;
      release(i);
      if (int rc = apply(src, rec)) return rc;
      progress = true;
      break;
    }
  }
  return 0;
}

int OrderingEngine::on_signal(uint32_t src, const SignalRecord& rec, uint64_t now_ns) {
  if (src >= cfg_.num_ranks) return fail(-EINVAL, "signal from unknown peer " + std::to_string(src));
  if (rec.tag >= cfg_.num_tags)
    return fail(-EINVAL, "signal from peer " + std::to_string(src) + " names tag " + std::to_string(rec.tag) +
                             " (num_tags " + std::to_string(cfg_.num_tags) + ")");
  if (rec.fence > static_cast<uint8_t>(Fence::kOrdered))
    return fail(-EPROTO, "signal from peer " + std::to_string(src) + " has fence mode " + std::to_string(rec.fence));
  if (cfg_.bypass || rec.fence == static_cast<uint8_t>(Fence::kNone)) return apply(src, rec);
  Group& g = group(src, rec.tag);
  int32_t i;
  if (rec.fence == static_cast<uint8_t>(Fence::kCount)) {
    if (g.count_head < 0 && g.landed - g.consumed >= rec.fence_count) {  // fast path: nothing to wait for
      g.consumed += rec.fence_count;
      return apply(src, rec);
    }
    if (int rc = hold(src, rec, now_ns, &i)) return rc;
    (g.count_tail < 0 ? g.count_head : pool_[g.count_tail].next) = i;
    g.count_tail = i;
    return 0;
  }
  const uint32_t ahead = (rec.segment - g.next_segment) & (imm::kNumSegments - 1);
  if (ahead >= kWindow)
    return fail(-EPROTO, "ordered signal from peer " + std::to_string(src) + " on tag " + std::to_string(rec.tag) +
                             " closes segment " + std::to_string(rec.segment) + " while segment " +
                             std::to_string(g.next_segment) + " is open: more than " + std::to_string(kWindow) +
                             " ordered signals in flight, or a duplicate");
  if (int rc = hold(src, rec, now_ns, &i)) return rc;
  pool_[i].next = g.ordered;
  g.ordered = i;
  return drain_ordered(src, rec.tag, g);
}

int OrderingEngine::check_timeouts(uint64_t now_ns) {
  if (held_ == 0) return 0;
  for (const Held& h : pool_) {
    if (!h.used || now_ns - h.since_ns <= cfg_.timeout_ns) continue;
    const Group& g = groups_[static_cast<size_t>(h.src) * cfg_.num_tags + h.rec.tag];
    std::string what;
    if (h.rec.fence == static_cast<uint8_t>(Fence::kCount)) {
      const uint32_t have = g.landed - g.consumed;
      what = std::to_string(h.rec.fence_count - have) + " of its " + std::to_string(h.rec.fence_count) +
             " writes never arrived (" + std::to_string(have) + " landed)";
    } else if (h.rec.segment != g.next_segment) {
      what = "it closes segment " + std::to_string(h.rec.segment) + " but segment " + std::to_string(g.next_segment) +
             " was never closed (its signal or writes are missing)";
    } else {
      const uint32_t have = g.seg_landed[h.rec.segment % kWindow];
      what = std::to_string(h.rec.fence_count - have) + " of the " + std::to_string(h.rec.fence_count) +
             " writes of segment " + std::to_string(h.rec.segment) + " never arrived";
    }
    timed_out_src_ = h.src;
    return fail(-ETIMEDOUT, std::string(fence_name(h.rec.fence)) + " signal from peer " + std::to_string(h.src) +
                                " for tag (LL expert / HT channel) " + std::to_string(h.rec.tag) + ", counter " +
                                std::to_string(h.rec.counter) + " held for more than " +
                                std::to_string(cfg_.timeout_ns / 1000000) + " ms: " + what);
  }
  return 0;
}

void OrderingEngine::drop_peer(uint32_t src) {
  if (src >= cfg_.num_ranks) return;
  for (uint32_t i = 0; i < pool_.size(); ++i)
    if (pool_[i].used && pool_[i].src == src) release(static_cast<int32_t>(i));
  for (uint32_t t = 0; t < cfg_.num_tags; ++t) group(src, t) = Group{};
}

}  // namespace anyep::proxy
