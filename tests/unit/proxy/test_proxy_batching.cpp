// The proxy's WRITE batching (consecutive WRITEs of a ring drain go out with one post_writes) at
// its edges: batches cut short by -EAGAIN at any point (the rest retried, nothing lost or posted
// twice), SIGNALs between writes to the same peer, writes to two peers interleaved in one batch,
// single posts (the SIGNAL records) refused now and then, over loopback (in posting order, the
// engine bypassed) and under chaos (reordered, the engine on). The checks count: every write
// carries a +1 to its round's counter (exactly 3 per round and peer: a lost write leaves fewer, a
// duplicated one more) and each round's SIGNAL has a counter of its own (exactly 1), and the bytes
// of a round must be in place when its SIGNAL is seen. Negative controls: a transport that loses
// or duplicates a write of a cut batch must be caught by these same checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "batch_cutter.h"
#include "common/portability.h"
#include "testkit/local_cluster.h"
#include "transport/chaos/chaos_transport.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::testkit;
using anyep::proxy::testing::BatchCutter;
using anyep::proxy::testing::Cut;
using anyep::proxy::testing::CutStats;

namespace {

constexpr uint32_t kRounds = 48, kWritesPerPeer = 3, kBytes = 256, kPeers = 2;

uint8_t pattern(uint32_t round, uint32_t peer, uint32_t k, uint32_t b) {
  return static_cast<uint8_t>(round * 131 + peer * 71 + k * 29 + b * 7 + 1);
}
uint64_t src_off(uint32_t round, uint32_t peer, uint32_t k) {
  return ((uint64_t{round} * kPeers + peer) * kWritesPerPeer + k) * kBytes;
}
uint64_t dst_off(uint32_t round, uint32_t k) {
  return (1u << 16) + (uint64_t{round} * kWritesPerPeer + k) * kBytes;  // same slot on each peer
}

// Rank 0 sends kRounds rounds: per round 3 writes to each of ranks 1 and 2, interleaved
// (1, 2, 1, 2, 1, 2), each with a +1 on counter[round] (tag = round), then one count-fenced SIGNAL
// per peer on counter[kRounds + round] after its 3 writes. Everything is pushed before the proxies
// start, so the proxy drains full batches (up to 32 commands) that mix both peers and SIGNALs.
// Returns "" or the first violation seen by ranks 1 and 2.
std::string run_rounds(int ordering, bool chaos, Cut mode, uint64_t seed, double wait_s,
                       std::shared_ptr<CutStats> stats) {
  LocalClusterConfig c;
  c.ranks = 3;
  c.threads = 1;
  c.rings = 1;
  c.ring_capacity = 1024;
  c.buffer_bytes = 1 << 17;
  c.num_counters = 2 * kRounds;
  c.proxy.ordering = static_cast<Ordering>(ordering);
  c.proxy.num_tags = kRounds;
  c.proxy.signal_slots = 8;  // few credits: SIGNALs meet backpressure too
  c.proxy.timeout_ns = 20'000'000'000ull;
  c.proxy.ranks_per_node = 1;
  EndpointFactory inner = loopback_factory(3, 1);
  c.endpoints = [=](uint32_t r, uint32_t t) -> std::unique_ptr<transport::Transport> {
    std::unique_ptr<transport::Transport> ep = inner(r, t);
    if (chaos) {
      transport::chaos::ChaosConfig cc;
      cc.seed = seed * 7919 + r;
      cc.max_delay = 16;
      ep = transport::chaos::make_chaos_transport(std::move(ep), cc);
    }
    return std::make_unique<BatchCutter>(std::move(ep), seed * 31 + r, mode, stats);
  };
  LocalCluster cl(c);
  uint8_t* src = cl.rank(0).bytes();
  for (uint32_t r = 0; r < kRounds; ++r)
    for (uint32_t p = 0; p < kPeers; ++p)
      for (uint32_t k = 0; k < kWritesPerPeer; ++k)
        for (uint32_t b = 0; b < kBytes; ++b) src[src_off(r, p, k) + b] = pattern(r, p, k, b);
  RingHandle h = cl.rank(0).channel->producer(0);
  for (uint32_t r = 0; r < kRounds; ++r) {
    for (uint32_t k = 0; k < kWritesPerPeer; ++k)
      for (uint32_t p = 0; p < kPeers; ++p)
        if (h.push(make_write(1 + p, src_off(r, p, k), dst_off(r, k), kBytes, r, /*signal=*/true)) == kPushFailed)
          return "push failed";
    for (uint32_t p = 0; p < kPeers; ++p)
      if (h.push(make_signal(1 + p, kRounds + r, 1, cmd::kFenceCount, r, kWritesPerPeer)) == kPushFailed)
        return "push failed";
  }
  cl.start();
  std::string bad;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (uint32_t p = 0; p < kPeers && bad.empty(); ++p) {
    LocalCluster::Rank& rk = cl.rank(1 + p);
    for (uint32_t r = 0; r < kRounds && bad.empty(); ++r) {
      const uint64_t* sig = &rk.counters[kRounds + r];
      while (port::load_acquire_system(sig) == 0 && std::chrono::steady_clock::now() < end) std::this_thread::yield();
      if (port::load_acquire_system(sig) == 0) {
        bad = "rank " + std::to_string(1 + p) + " round " + std::to_string(r) + ": SIGNAL never applied (lost)";
        break;
      }
      // The SIGNAL vouches for its 3 writes: their bytes must be in place now.
      for (uint32_t k = 0; k < kWritesPerPeer && bad.empty(); ++k)
        for (uint32_t b = 0; b < kBytes; ++b)
          if (rk.bytes()[dst_off(r, k) + b] != pattern(r, p, k, b)) {
            bad = "rank " + std::to_string(1 + p) + " round " + std::to_string(r) + " write " + std::to_string(k) +
                  ": SIGNAL seen before its data";
            break;
          }
    }
  }
  // Let anything posted twice land, then the counts must be exact.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (uint32_t p = 0; p < kPeers && bad.empty(); ++p)
    for (uint32_t r = 0; r < kRounds && bad.empty(); ++r) {
      const uint64_t w = port::load_acquire_system(&cl.rank(1 + p).counters[r]);
      const uint64_t s = port::load_acquire_system(&cl.rank(1 + p).counters[kRounds + r]);
      if (w != kWritesPerPeer)
        bad = "rank " + std::to_string(1 + p) + " round " + std::to_string(r) + ": " + std::to_string(w) +
              " writes landed, 3 sent (" + (w > kWritesPerPeer ? "duplicated" : "lost") + ")";
      else if (s != 1)
        bad = "rank " + std::to_string(1 + p) + " round " + std::to_string(r) + ": SIGNAL applied " +
              std::to_string(s) + " times";
    }
  if (bad.empty()) {
    try {
      cl.check();
    } catch (const std::exception& e) {
      bad = e.what();
    }
  }
  cl.stop();
  return bad;
}

struct Mode {
  const char* name;
  int ordering;
  bool chaos;
};
void PrintTo(const Mode& m, std::ostream* os) { *os << m.name; }
class ProxyBatching : public ::testing::TestWithParam<Mode> {};

}  // namespace

TEST_P(ProxyBatching, CutBatchesLoseNothingPostNothingTwiceAndSignalsFollowTheirData) {
  for (uint64_t seed = 1; seed <= 4 && !HasFailure(); ++seed) {
    auto stats = std::make_shared<CutStats>();
    EXPECT_EQ(run_rounds(GetParam().ordering, GetParam().chaos, Cut::kHonest, seed, 20, stats), "") << "seed " << seed;
    // The edges were really exercised: batches of several writes, some cut, single posts refused.
    EXPECT_GT(stats->largest.load(), 4u);
    EXPECT_GT(stats->cut.load(), 10u);
    EXPECT_GT(stats->refused_single.load(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ProxyBatching,
                         ::testing::Values(Mode{"loopback_bypass", static_cast<int>(Ordering::kAuto), false},
                                           Mode{"loopback_engine", static_cast<int>(Ordering::kEngine), false},
                                           Mode{"chaos_engine", static_cast<int>(Ordering::kAuto), true}),
                         [](const auto& i) { return std::string(i.param.name); });

// Negative controls: the same checks catch a write lost or posted twice inside a cut batch.
TEST(ProxyBatchingControls, ADuplicatedWriteIsCaught) {
  const std::string e =
      run_rounds(static_cast<int>(Ordering::kAuto), false, Cut::kDuplicateOne, 3, 10, std::make_shared<CutStats>());
  EXPECT_NE(e.find("(duplicated)"), std::string::npos) << e;
}
TEST(ProxyBatchingControls, ALostWriteIsCaught) {
  const std::string e =
      run_rounds(static_cast<int>(Ordering::kAuto), false, Cut::kLoseOne, 3, 2, std::make_shared<CutStats>());
  EXPECT_TRUE(e.find("(lost)") != std::string::npos || e.find("SIGNAL seen before its data") != std::string::npos) << e;
}
