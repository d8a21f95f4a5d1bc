// post_atomic_add on the in-process backends: concurrent adds from every rank sum exactly, each
// completes once, bad targets are refused naming what was wrong, and the chaos wrapper passes adds
// through (the libfabric backend's are tested across processes in tests/mp/transport).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "transport/chaos/chaos_transport.h"
#include "transport/loopback/loopback_transport.h"

namespace anyep::transport {
namespace {

// n ranks on one fabric; every rank registers `words` 64-bit counters and imports every peer's.
struct World {
  std::vector<std::unique_ptr<Transport>> t;
  std::vector<std::vector<uint64_t>> words;
  World(uint32_t n, size_t count, bool chaos) : words(n, std::vector<uint64_t>(count, 0)) {
    auto fabric = loopback::make_fabric(n);
    for (uint32_t r = 0; r < n; ++r) {
      auto ep = loopback::make_endpoint(fabric, r);
      if (chaos) {
        chaos::ChaosConfig c;
        c.seed = 7 + r;
        ep = chaos::make_chaos_transport(std::move(ep), c);
      }
      t.push_back(std::move(ep));
    }
    std::vector<std::vector<uint8_t>> addrs;
    for (auto& e : t) addrs.push_back(e->local_address());
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(t[r]->register_memory(words[r].data(), count * 8, MemKind::kHost), 0u);
      t[r]->connect(addrs);
    }
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t p = 0; p < n; ++p) t[r]->import_mr(p, 0, t[p]->export_mr(0));
  }
};

// Rank r adds (r + 1) to word w of every rank, `rounds` times, and -1 to word `count - 1`; each
// add's context is counted back from poll() exactly once.
void run_adds(World& w, uint32_t r, int rounds, std::vector<int>* completions) {
  Transport& ep = *w.t[r];
  const uint32_t n = static_cast<uint32_t>(w.t.size());
  const size_t count = w.words[0].size();
  uint64_t posted = 0;
  for (int k = 0; k < rounds; ++k)
    for (uint32_t p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) {
        const uint64_t v = i + 1 == count ? ~0ull : r + 1;  // ~0: -1 modulo 2^64
        AtomicAddDesc a{p, 0, 8 * i, v, posted};
        int rc;
        while ((rc = ep.post_atomic_add(a)) == -EAGAIN) {
          Completion c[64];
          ImmEvent im[8];
          size_t nc = 0, ni = 0;
          ASSERT_EQ(ep.poll(c, 64, &nc, im, 8, &ni), 0);
          for (size_t j = 0; j < nc; ++j) ++(*completions)[c[j].context];
        }
        ASSERT_EQ(rc, 0) << ep.last_error();
        ++posted;
      }
  for (int spins = 0; spins < 100000; ++spins) {
    Completion c[64];
    ImmEvent im[8];
    size_t nc = 0, ni = 0;
    ASSERT_EQ(ep.poll(c, 64, &nc, im, 8, &ni), 0) << ep.last_error();
    for (size_t j = 0; j < nc; ++j) ++(*completions)[c[j].context];
    bool all = true;
    for (uint64_t i = 0; i < posted && all; ++i) all = (*completions)[i] != 0;
    if (all) break;
    std::this_thread::yield();
  }
}

void expect_exact_sums(bool chaos) {
  constexpr uint32_t kRanks = 4;
  constexpr size_t kWords = 5;
  constexpr int kRounds = 200;
  World w(kRanks, kWords, chaos);
  ASSERT_TRUE(w.t[0]->capabilities().native_atomics) << w.t[0]->capabilities().backend;
  const size_t per_rank = static_cast<size_t>(kRounds) * kRanks * kWords;
  std::vector<std::vector<int>> done(kRanks, std::vector<int>(per_rank, 0));
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < kRanks; ++r) th.emplace_back([&, r] { run_adds(w, r, kRounds, &done[r]); });
  for (auto& x : th) x.join();
  // Every add completed exactly once.
  for (uint32_t r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < per_rank; ++i) ASSERT_EQ(done[r][i], 1) << "rank " << r << " add " << i;
  // Word i < kWords - 1 of every rank: sum over ranks of (r + 1), kRounds times; the last word took
  // kRanks * kRounds adds of -1 (wraps below zero as a two's complement count).
  const uint64_t want = static_cast<uint64_t>(kRounds) * (kRanks * (kRanks + 1) / 2);
  for (uint32_t p = 0; p < kRanks; ++p) {
    for (size_t i = 0; i + 1 < kWords; ++i)
      EXPECT_EQ(__atomic_load_n(&w.words[p][i], __ATOMIC_SEQ_CST), want) << "rank " << p << " word " << i;
    EXPECT_EQ(static_cast<int64_t>(__atomic_load_n(&w.words[p][kWords - 1], __ATOMIC_SEQ_CST)),
              -static_cast<int64_t>(kRanks) * kRounds);
  }
}

TEST(TransportAtomics, LoopbackConcurrentAddsSumExactly) { expect_exact_sums(false); }
TEST(TransportAtomics, ChaosPassesAtomicAddsThrough) { expect_exact_sums(true); }

TEST(TransportAtomics, BadTargetsAreRefusedNamingWhatWasWrong) {
  World w(2, 4, false);
  Transport& ep = *w.t[0];
  struct Case {
    AtomicAddDesc a;
    const char* says;
  } cases[] = {
      {{5, 0, 0, 1, 0}, "unknown peer rank 5"},
      {{1, 3, 0, 1, 0}, "region 3 of rank 1 was never imported"},
      {{1, 0, 4, 1, 0}, "offset 4 of region 0 of rank 1 is not 8-byte aligned"},
      {{1, 0, 32, 1, 0}, "past the end of region 0 of rank 1 (32 bytes)"},
      {{1, 0, ~7ull, 1, 0}, "past the end of region 0"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ep.post_atomic_add(c.a), -EINVAL);
    EXPECT_NE(ep.last_error().find(c.says), std::string::npos) << ep.last_error();
  }
  for (uint64_t v : w.words[1]) EXPECT_EQ(v, 0u);
  Completion c[4];
  ImmEvent im[4];
  size_t nc = 0, ni = 0;
  ASSERT_EQ(ep.poll(c, 4, &nc, im, 4, &ni), 0);
  EXPECT_EQ(nc, 0u) << "a refused add completed";
}

}  // namespace
}  // namespace anyep::transport
