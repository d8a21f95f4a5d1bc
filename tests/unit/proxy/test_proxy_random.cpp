// The seeded randomized test: producer threads play GPU warps issuing LL-shaped streams (token
// writes then a count signal) and HT-shaped streams (chunk writes then an ordered tail signal),
// an observer thread per rank plays the receiving kernel (src/proxy/workload.h lists the
// invariants it checks). Over loopback with and without the ordering engine, T = 1 and 2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <thread>

#include "batch_cutter.h"
#include "common/error.h"
#include "testkit/local_cluster.h"
#include "testkit/tsan_transport.h"
#include "testkit/workload.h"
#include "transport/chaos/chaos_transport.h"

using namespace anyep;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

struct Case {
  uint32_t ranks, threads, producers;
  int ordering;
  uint64_t seed;
  uint32_t signal_slots = 16;       // small: exercises credit flow control
  bool ht_unfenced_tail = false;    // negative control: the run must report a data violation
  std::string* ht_found = nullptr;  // with it: the violation's text goes here, not into EXPECTs
  bool native = false;              // ProxyConfig::native_atomics: signals as the transport's adds
};

void run_case(const Case& c, const EndpointFactory& endpoints = {}) {
  WorkloadConfig w;
  w.seed = c.seed;
  w.ranks = c.ranks;
  w.producers = c.producers;
  w.ll_rounds = 40;
  w.ht_chunks = 80;
  // The negative control ends with the other ranks waiting for acks the failed observer no longer
  // sends: a short limit ends them (the violation, found first, is what is reported).
  // (TSan runs ~10x slower: a limit that leaves the violation time to be found first.)
  w.timeout_s = c.ht_unfenced_tail ? (tsan_build() ? 20 : 2) : 30;
  w.ht_unfenced_tail = c.ht_unfenced_tail;
  LocalClusterConfig lc;
  lc.ranks = c.ranks;
  lc.threads = c.threads;
  lc.rings = StreamWorkload::num_rings(w);
  lc.ring_capacity = 64;  // small rings: producers meet backpressure
  lc.buffer_bytes = StreamWorkload::buffer_bytes(w);
  lc.num_counters = StreamWorkload::num_counters(w);
  lc.proxy.num_tags = StreamWorkload::num_tags(w);
  lc.proxy.ordering = static_cast<Ordering>(c.ordering);
  lc.proxy.signal_slots = c.signal_slots;
  lc.proxy.staging_slots = 8;
  lc.proxy.timeout_ns = 30'000'000'000ull;
  lc.proxy.native_atomics = c.native;
  lc.endpoints = endpoints;
  LocalCluster cl(lc);
  cl.start();
  std::vector<std::exception_ptr> errs(c.ranks);
  std::vector<WorkloadResult> res(c.ranks);
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < c.ranks; ++r)
    th.emplace_back([&, r] {
      try {
        StreamWorkload wl(w, r, cl.rank(r).bytes(), cl.rank(r).counters.get(), *cl.rank(r).channel,
                          [&](uint32_t d) -> const uint8_t* { return cl.rank(d).bytes(); });
        res[r] = wl.run([&] { cl.rank(r).proxy->check(); });
      } catch (...) {
        errs[r] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  if (c.ht_unfenced_tail) {
    // Without the fence some tail must overtake its chunk's bytes, and the observer must say so.
    std::string found;
    if (auto e = first_by_precedence(errs)) try {
        std::rethrow_exception(e);
      } catch (const DataViolation& v) {
        found = v.what();
      } catch (const std::exception& x) {
        // With ht_found the caller tries another seed (a loaded machine can stall a run's observer).
        if (c.ht_found)
          found = std::string("not a data violation: ") + x.what();
        else
          ADD_FAILURE() << "expected a data violation, got: " << x.what();
      }
    if (c.ht_found)
      *c.ht_found = found;
    else
      EXPECT_NE(found.find("HT tail"), std::string::npos) << "no HT tail overtook its data: " << found;
    cl.stop();
    return;
  }
  for (uint32_t r = 0; r < c.ranks; ++r)
    if (errs[r]) {
      try {
        std::rethrow_exception(errs[r]);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    }
  cl.stop();  // stats are exact once the threads are joined
  cl.check();
  uint64_t cmds = 0;
  for (auto& x : res) cmds += x.commands;
  uint64_t retired = 0;
  for (uint32_t r = 0; r < c.ranks; ++r) retired += cl.rank(r).proxy->stats().commands;
  EXPECT_EQ(retired, cmds) << "every pushed command was retired exactly once";
  EXPECT_GT(cmds, 1000u);
  for (uint32_t r = 0; r < c.ranks; ++r) {
    const ProxyStats st = cl.rank(r).proxy->stats();
    if (c.native) {  // every signal went out as an add; the receiving proxies applied none
      EXPECT_EQ(st.signals_native, st.signals_sent) << "rank " << r;
      EXPECT_GT(st.signals_native, 0u) << "rank " << r;
      EXPECT_EQ(st.signals_applied, 0u) << "rank " << r;
    } else {
      EXPECT_EQ(st.signals_native, 0u) << "rank " << r;
    }
  }
}

// Loopback wrapped in the chaos transport: writes land, immediates arrive and completions surface
// in a seeded shuffled order (EFA SRD-like), so the ordering engine has real work to do.
EndpointFactory chaos_factory(uint32_t ranks, uint32_t threads, uint64_t seed, uint32_t max_delay) {
  EndpointFactory inner = loopback_factory(ranks, threads);
  return [=](uint32_t rank, uint32_t thread) {
    transport::chaos::ChaosConfig cc;
    cc.seed = seed * 1000003 + rank * 101 + thread;
    cc.max_delay = max_delay;
    return transport::chaos::make_chaos_transport(inner(rank, thread), cc);
  };
}

// The chaos factory's endpoints behind a BatchCutter: every post_writes may be cut short with
// -EAGAIN and single posts are refused now and then (the proxy retries the rest of a batch).
EndpointFactory cut_chaos_factory(uint32_t ranks, uint32_t threads, uint64_t seed, uint32_t max_delay,
                                  std::shared_ptr<anyep::proxy::testing::CutStats> stats) {
  EndpointFactory inner = chaos_factory(ranks, threads, seed, max_delay);
  return [=](uint32_t rank, uint32_t thread) -> std::unique_ptr<transport::Transport> {
    return std::make_unique<anyep::proxy::testing::BatchCutter>(inner(rank, thread), seed * 131 + rank * 7 + thread,
                                                                anyep::proxy::testing::Cut::kHonest, stats);
  };
}

uint64_t base_seed() {
  const char* s = std::getenv("ANYEP_TEST_SEED");  // test-only override to replay a failure
  return s ? std::strtoull(s, nullptr, 0) : 20261122;
}

}  // namespace

TEST(ProxyRandom, LoopbackBypass2Ranks1Thread) { run_case({2, 1, 2, static_cast<int>(Ordering::kAuto), base_seed()}); }
TEST(ProxyRandom, LoopbackEngine4Ranks2Threads) {
  run_case({4, 2, 3, static_cast<int>(Ordering::kEngine), base_seed() + 1});
}
TEST(ProxyRandom, LoopbackBypass4Ranks2Threads) {
  run_case({4, 2, 3, static_cast<int>(Ordering::kAuto), base_seed() + 2});
}

TEST(ProxyRandom, ChaosEngine2Ranks1Thread) {
  const uint64_t seed = base_seed() + 3;
  run_case({2, 1, 2, static_cast<int>(Ordering::kAuto), seed}, chaos_factory(2, 1, seed, 8));
}
TEST(ProxyRandom, ChaosEngine4Ranks2Threads) {
  const uint64_t seed = base_seed() + 4;
  run_case({4, 2, 3, static_cast<int>(Ordering::kAuto), seed}, chaos_factory(4, 2, seed, 16));
}

// The negative control of the HT partial-order fence (kernels/ht/internode_protocol.h): the same
// chaos run with the tail signals unfenced must be caught (a tail observed before its chunk).
TEST(ProxyRandom, ChaosUnfencedHtTailIsCaught) {
  // Long holds (up to 4096 polls) make the window in which a tail is visible and its chunk write
  // still held wide; even so, on a loaded 2-core machine one seed's run can end without the
  // observer looking into that window (seen 2 runs in 4 beside a sanitizer build). The control
  // holds if some seed of a few is caught; with the fence no seed ever is (the twin below).
  std::string found, all;
  for (uint64_t k = 0; k < 4 && found.find("HT tail") == std::string::npos; ++k) {
    const uint64_t seed = base_seed() + 5 + 100 * k;
    Case c{2, 1, 2, static_cast<int>(Ordering::kAuto), seed};
    c.ht_unfenced_tail = true;
    c.ht_found = &found;
    run_case(c, chaos_factory(2, 1, seed, 4096));
    all += "\n  seed " + std::to_string(seed) + ": " + (found.empty() ? "no violation" : found);
  }
  EXPECT_NE(found.find("HT tail"), std::string::npos) << "no HT tail overtook its data in 4 seeds:" << all;
}
// Its positive twin: the same seed and holds with the fence pass, so the fence is what matters.
TEST(ProxyRandom, ChaosLongHoldsFencedHtTailHolds) {
  const uint64_t seed = base_seed() + 5;
  run_case({2, 1, 2, static_cast<int>(Ordering::kAuto), seed}, chaos_factory(2, 1, seed, 4096));
}

// Four signal slots per peer and long chaos delays: signal records are read far out of order, so
// credits must only hand back slots below the oldest unread one.
TEST(ProxyRandom, ChaosTinySignalArea) {
  for (uint64_t k = 0; k < 3 && !HasFailure(); ++k) {
    const uint64_t seed = base_seed() + 5 + k;
    Case c{3, 1, 3, static_cast<int>(Ordering::kAuto), seed};
    c.signal_slots = 4;
    run_case(c, chaos_factory(3, 1, seed, 48));
  }
}

// The workload (every byte and count checked) with WRITE batches cut at random points by -EAGAIN
// under chaos: a lost or twice-posted write, or a signal overtaking its data, fails it.
TEST(ProxyRandom, ChaosCutBatches4Ranks2Threads) {
  const uint64_t seed = base_seed() + 8;
  auto stats = std::make_shared<anyep::proxy::testing::CutStats>();
  run_case({4, 2, 3, static_cast<int>(Ordering::kAuto), seed}, cut_chaos_factory(4, 2, seed, 16, stats));
  EXPECT_GT(stats->cut.load(), 0u);
}

// Native atomics (ProxyConfig::native_atomics): the sending proxy posts each signal as the
// transport's atomic add once the writes it is fenced after completed. Loopback places a write at
// post time; under chaos writes are posted late and completions surface late and shuffled while
// adds go straight through, so an add posted before its writes' completions would overtake them.
TEST(ProxyRandom, LoopbackNative4Ranks2Threads) {
  Case c{4, 2, 3, static_cast<int>(Ordering::kAuto), base_seed() + 20};
  c.native = true;
  run_case(c);
}
TEST(ProxyRandom, ChaosNative2Ranks1Thread) {
  const uint64_t seed = base_seed() + 21;
  Case c{2, 1, 2, static_cast<int>(Ordering::kAuto), seed};
  c.native = true;
  run_case(c, chaos_factory(2, 1, seed, 8));
}
TEST(ProxyRandom, ChaosNative4Ranks2ThreadsCutBatches) {
  const uint64_t seed = base_seed() + 22;
  auto stats = std::make_shared<anyep::proxy::testing::CutStats>();
  Case c{4, 2, 3, static_cast<int>(Ordering::kAuto), seed};
  c.native = true;
  run_case(c, cut_chaos_factory(4, 2, seed, 16, stats));
  EXPECT_GT(stats->cut.load(), 0u);
}
// The negative control of the sender-side fence: HT tails unfenced, so their adds go out as soon as
// they are read, before the chunk's writes (held by chaos) completed: some tail must be seen
// before its bytes. Its twin below passes with the same seed and holds.
TEST(ProxyRandom, ChaosNativeUnfencedHtTailIsCaught) {
  std::string found, all;
  for (uint64_t k = 0; k < 4 && found.find("HT tail") == std::string::npos; ++k) {
    const uint64_t seed = base_seed() + 23 + 100 * k;
    Case c{2, 1, 2, static_cast<int>(Ordering::kAuto), seed};
    c.native = true;
    c.ht_unfenced_tail = true;
    c.ht_found = &found;
    run_case(c, chaos_factory(2, 1, seed, 4096));
    all += "\n  seed " + std::to_string(seed) + ": " + (found.empty() ? "no violation" : found);
  }
  EXPECT_NE(found.find("HT tail"), std::string::npos) << "no native HT tail overtook its data in 4 seeds:" << all;
}
TEST(ProxyRandom, ChaosNativeLongHoldsFencedHtTailHolds) {
  const uint64_t seed = base_seed() + 23;
  Case c{2, 1, 2, static_cast<int>(Ordering::kAuto), seed};
  c.native = true;
  run_case(c, chaos_factory(2, 1, seed, 4096));
}
