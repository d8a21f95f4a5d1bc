// The ordering engine on its own: events fed in chosen and in random orders; after every event
// the counters must equal what the fences allow given the events delivered so far.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "proxy/ordering_engine.h"

using namespace anyep::proxy;

namespace {

struct Fixture {
  std::vector<uint64_t> counters;
  OrderingEngine engine;
  Fixture(uint32_t ranks, uint32_t tags, uint32_t ncounters, bool bypass = false, uint32_t max_pending = 4096,
          uint64_t timeout_ns = 1'000'000'000)
      : counters(ncounters, 0),
        engine(EngineConfig{0, ranks, tags, max_pending, timeout_ns, bypass, counters.data(), ncounters}) {}
};

SignalRecord sig(uint32_t counter, int32_t value, uint32_t tag, Fence f, uint32_t fence_count, uint32_t segment = 0) {
  SignalRecord r{};
  r.counter = counter;
  r.value = value;
  r.tag = static_cast<uint16_t>(tag);
  r.fence = static_cast<uint8_t>(f);
  r.fence_count = fence_count;
  r.segment = static_cast<uint8_t>(segment);
  return r;
}

}  // namespace

TEST(OrderingEngine, CountFenceHoldsUntilItsWritesLandOtherTagsDoNotWait) {
  Fixture f(4, 8, 8);
  // Signal for (src 1, tag 3) vouching for 3 writes arrives first.
  ASSERT_EQ(f.engine.on_signal(1, sig(3, 7, 3, Fence::kCount, 3), 0), 0);
  EXPECT_EQ(f.counters[3], 0u);
  EXPECT_EQ(f.engine.held(), 1u);
  // A different tag of the same source: its writes are there, it is applied at once.
  ASSERT_EQ(f.engine.on_write(1, imm::encode_write(5, 0, false), 0), 0);
  ASSERT_EQ(f.engine.on_signal(1, sig(5, 1, 5, Fence::kCount, 1), 0), 0);
  EXPECT_EQ(f.counters[5], 1u);
  // Writes of the same tag from another source do not count for source 1.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(f.engine.on_write(2, imm::encode_write(3, 0, false), 0), 0);
  EXPECT_EQ(f.counters[3], 0u);
  ASSERT_EQ(f.engine.on_write(1, imm::encode_write(3, 0, false), 0), 0);
  ASSERT_EQ(f.engine.on_write(1, imm::encode_write(3, 0, false), 0), 0);
  EXPECT_EQ(f.counters[3], 0u);
  ASSERT_EQ(f.engine.on_write(1, imm::encode_write(3, 0, false), 0), 0);
  EXPECT_EQ(f.counters[3], 7u);
  EXPECT_EQ(f.engine.held(), 0u);
}

TEST(OrderingEngine, NegativeValuesAndZeroCounts) {
  Fixture f(2, 4, 4);
  ASSERT_EQ(f.engine.on_signal(1, sig(2, -5, 0, Fence::kCount, 0), 0), 0);
  EXPECT_EQ(static_cast<int64_t>(f.counters[2]), -5) << "a count of 0 vouches for nothing";
  ASSERT_EQ(f.engine.on_signal(1, sig(1, 4, 0, Fence::kNone, 99), 0), 0);
  EXPECT_EQ(f.counters[1], 4u) << "unfenced signals apply on arrival";
}

TEST(OrderingEngine, PlusOneCountsItsOwnWrite) {
  Fixture f(2, 4, 4);
  ASSERT_EQ(f.engine.on_write(1, imm::encode_write(2, 0, true), 0), 0);
  ASSERT_EQ(f.engine.on_write(1, imm::encode_write(2, 0, true), 0), 0);
  EXPECT_EQ(f.counters[2], 2u);
}

// Random arrival order of an LL round from every source: (src, tag) groups of N writes and one
// count signal each. After every event, counter[group] must be set iff its signal and all its
// writes have arrived.
TEST(OrderingEngine, CountFenceRandomOrders) {
  const uint32_t ranks = 6, tags = 5;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    Fixture f(ranks, tags, ranks * tags);
    struct Ev {
      uint32_t src, tag;
      bool is_signal;
    };
    std::vector<Ev> evs;
    std::vector<uint32_t> need(ranks * tags), got(ranks * tags, 0);
    std::vector<bool> sig_in(ranks * tags, false);
    for (uint32_t s = 0; s < ranks; ++s)
      for (uint32_t t = 0; t < tags; ++t) {
        need[s * tags + t] = rng() % 9;  // 0..8 tokens
        for (uint32_t i = 0; i < need[s * tags + t]; ++i) evs.push_back({s, t, false});
        evs.push_back({s, t, true});
      }
    std::shuffle(evs.begin(), evs.end(), rng);
    for (const Ev& e : evs) {
      const uint32_t g = e.src * tags + e.tag;
      if (e.is_signal) {
        ASSERT_EQ(f.engine.on_signal(e.src, sig(g, 1, e.tag, Fence::kCount, need[g]), 0), 0) << f.engine.last_error();
        sig_in[g] = true;
      } else {
        ASSERT_EQ(f.engine.on_write(e.src, imm::encode_write(e.tag, 0, false), 0), 0) << f.engine.last_error();
        ++got[g];
      }
      for (uint32_t k = 0; k < ranks * tags; ++k)
        ASSERT_EQ(f.counters[k], (sig_in[k] && got[k] >= need[k]) ? 1u : 0u) << "seed " << seed << " group " << k;
    }
    EXPECT_EQ(f.engine.held(), 0u);
  }
}

// HT: one channel, S segments of random sizes, events shuffled inside a sliding window (the
// network reorders, but not by more than the window of segments). Signal g may be applied only
// when signal g-1 was applied and all writes of segment g landed. S > 256 exercises the wrap.
TEST(OrderingEngine, OrderedSegmentsWrapAndHoldInOrder) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    const uint32_t S = 700;
    Fixture f(2, 2, S, false, 1 << 14);
    struct Ev {
      uint32_t seg;
      bool is_signal;
    };
    std::vector<Ev> evs;
    std::vector<uint32_t> size(S), got(S, 0);
    std::vector<bool> sig_in(S, false);
    for (uint32_t g = 0; g < S; ++g) {
      size[g] = rng() % 4;
      for (uint32_t i = 0; i < size[g]; ++i) evs.push_back({g, false});
      evs.push_back({g, true});
    }
    // Bounded shuffle: sort by position + random jitter < 40, so no event moves by more than 40
    // places (far less than the engine's window of 64 segments).
    std::vector<std::pair<uint64_t, Ev>> keyed;
    for (size_t i = 0; i < evs.size(); ++i) keyed.push_back({i + rng() % 40, evs[i]});
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < evs.size(); ++i) evs[i] = keyed[i].second;
    uint32_t applied = 0;  // expected number of applied segments
    for (const Ev& e : evs) {
      if (e.is_signal) {
        ASSERT_EQ(f.engine.on_signal(1, sig(e.seg, 1, 1, Fence::kOrdered, size[e.seg], e.seg & 255), 0), 0)
            << f.engine.last_error();
        sig_in[e.seg] = true;
      } else {
        ASSERT_EQ(f.engine.on_write(1, imm::encode_write(1, e.seg & 255, false), 0), 0) << f.engine.last_error();
        ++got[e.seg];
      }
      while (applied < S && sig_in[applied] && got[applied] == size[applied]) ++applied;
      for (uint32_t g = 0; g < S; ++g)
        ASSERT_EQ(f.counters[g], g < applied ? 1u : 0u) << "seed " << seed << " seg " << g;
    }
    EXPECT_EQ(applied, S);
    EXPECT_EQ(f.engine.held(), 0u);
  }
}

TEST(OrderingEngine, SegmentTooFarAheadIsAnError) {
  Fixture f(2, 2, 2);
  EXPECT_EQ(f.engine.on_write(1, imm::encode_write(0, OrderingEngine::kWindow - 1, false), 0), 0);
  EXPECT_EQ(f.engine.on_write(1, imm::encode_write(0, OrderingEngine::kWindow, false), 0), -EPROTO);
  EXPECT_NE(f.engine.last_error().find("more than 64 ordered signals in flight"), std::string::npos)
      << f.engine.last_error();
}

TEST(OrderingEngine, HeldSignalTimesOutNamingPeerTagAndMissingWrites) {
  Fixture f(4, 8, 8, false, 16, 1000);
  ASSERT_EQ(f.engine.on_write(2, imm::encode_write(5, 0, false), 0), 0);
  ASSERT_EQ(f.engine.on_signal(2, sig(6, 1, 5, Fence::kCount, 3), 100), 0);
  EXPECT_EQ(f.engine.check_timeouts(1000), 0) << "not yet";
  EXPECT_EQ(f.engine.check_timeouts(1101), -ETIMEDOUT);
  const std::string& e = f.engine.last_error();
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
  EXPECT_NE(e.find("peer 2"), std::string::npos) << e;
  EXPECT_NE(e.find("tag (LL expert / HT channel) 5"), std::string::npos) << e;
  EXPECT_NE(e.find("2 of its 3 writes never arrived"), std::string::npos) << e;
}

TEST(OrderingEngine, OrderedTimeoutNamesTheOpenSegment) {
  Fixture f(2, 2, 2, false, 16, 1000);
  ASSERT_EQ(f.engine.on_signal(1, sig(0, 1, 1, Fence::kOrdered, 0, 1), 0), 0);  // closes segment 1; 0 missing
  EXPECT_EQ(f.engine.check_timeouts(5000), -ETIMEDOUT);
  EXPECT_NE(f.engine.last_error().find("segment 0 was never closed"), std::string::npos) << f.engine.last_error();
}

TEST(OrderingEngine, BypassAppliesOnArrival) {
  Fixture f(2, 2, 2, true);
  ASSERT_EQ(f.engine.on_signal(1, sig(1, 3, 1, Fence::kCount, 10), 0), 0);
  EXPECT_EQ(f.counters[1], 3u);
  EXPECT_EQ(f.engine.held(), 0u);
}

TEST(OrderingEngine, RejectsBadInput) {
  Fixture f(2, 4, 4, false, 2);
  EXPECT_EQ(f.engine.on_write(1, imm::encode_write(9, 0, false), 0), -EINVAL);
  EXPECT_NE(f.engine.last_error().find("tag 9"), std::string::npos);
  EXPECT_EQ(f.engine.on_write(7, imm::encode_write(1, 0, false), 0), -EINVAL);
  EXPECT_EQ(f.engine.on_signal(1, sig(99, 1, 0, Fence::kNone, 0), 0), -EINVAL);
  EXPECT_NE(f.engine.last_error().find("counter 99"), std::string::npos);
  EXPECT_EQ(f.engine.on_write(1, imm::encode_signal(3), 0), -EPROTO) << "not a write immediate";
  SignalRecord bad = sig(0, 1, 0, Fence::kNone, 0);
  bad.fence = 7;
  EXPECT_EQ(f.engine.on_signal(1, bad, 0), -EPROTO);
  // Pool of 2 held signals: the third is refused with a clear error.
  ASSERT_EQ(f.engine.on_signal(1, sig(0, 1, 0, Fence::kCount, 5), 0), 0);
  ASSERT_EQ(f.engine.on_signal(1, sig(0, 1, 1, Fence::kCount, 5), 0), 0);
  EXPECT_EQ(f.engine.on_signal(1, sig(0, 1, 2, Fence::kCount, 5), 0), -ENOBUFS);
  EXPECT_NE(f.engine.last_error().find("more than 2 signals held"), std::string::npos);
}
