// post_atomic_add of the libfabric backend between real processes on localhost (tcp pinned to lo,
// and shm), also through the chaos wrapper: every rank adds to every peer's words; each total is
// exact and every add completes once; an add's completion means it has been applied at the target.
// Asking for no atomics keeps them off and says how to ask.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../provider_required.h"
#include "testkit/mp_harness.h"
#include "transport/factory.h"
#include "transport/libfabric/libfabric_transport.h"

namespace anyep {
namespace {

struct Case {
  const char* provider;
  bool chaos;
};

std::unique_ptr<transport::Transport> make(const testkit::Rank& r, const std::string& prov, bool chaos, bool atomics,
                                           bool delivery_complete = false) {
  transport::TransportSpec spec;
  spec.name = prov.substr(0, prov.find(';'));
  spec.rank = r.rank;
  spec.num_ranks = r.size;
  spec.libfabric.provider = prov;
  spec.libfabric.want_hmem = false;  // host memory only (no CUDA context per rank on GPU hosts)
  spec.libfabric.want_atomics = atomics;
  spec.libfabric.delivery_complete = delivery_complete;
  if (chaos) {
    spec.chaos.emplace();
    spec.chaos->seed = 20261124;
  }
  return transport::make_transport(spec);
}

// An endpoint that asked for native atomics and got them (a rank's check fails naming why not).
std::unique_ptr<transport::Transport> make_with_atomics(const testkit::Rank& r, const Case& c) {
  auto t = make(r, c.provider, c.chaos, true);
  ANYEP_MP_CHECK(t->capabilities().native_atomics,
                 std::string("no native atomics granted: ") + transport::libfabric::describe(*t));
  return t;
}

class Atomics : public ::testing::TestWithParam<Case> {};

constexpr size_t kWords = 4;  // words 0..2: += sender + 1; word 3: += -1
constexpr int kRounds = 64;
constexpr uint32_t kDone = 0x4000u;  // immediate: "all my adds have completed"

TEST_P(Atomics, EveryRankAddsToEveryPeerExactlyOnce) {
  const Case c = GetParam();
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  ANYEP_REQUIRE_PROVIDER(transport::libfabric::provider_available(c.provider, &why), c.provider, why);
  testkit::RunOptions opt;
  opt.timeout_s = 90;
  auto res = testkit::run_ranks(
      3,
      [&](testkit::Rank& r) {
        auto t = make_with_atomics(r, c);
        std::vector<uint64_t> words(kWords, 0);
        auto id = t->register_memory(words.data(), words.size() * 8, transport::MemKind::kHost);
        transport::connect_all(*t, *r.boot, {id});
        const uint32_t n = r.size;
        std::vector<int> completed(static_cast<size_t>(kRounds) * n * kWords, 0);
        uint64_t posted = 0, done_comps = 0;
        uint32_t dones = 0;
        bool done_sent = false;
        transport::Completion cq[64];
        transport::ImmEvent im[64];
        size_t nc = 0, ni = 0;
        auto drain = [&] {
          ANYEP_MP_CHECK(t->poll(cq, 64, &nc, im, 64, &ni) == 0, t->last_error());
          for (size_t k = 0; k < nc; ++k) {
            ANYEP_MP_CHECK(cq[k].status == 0, "an add failed: " + t->last_error());
            if (cq[k].context == UINT64_MAX) {
              ++done_comps;
              continue;
            }
            ANYEP_MP_CHECK(cq[k].context < completed.size() && ++completed[cq[k].context] == 1,
                           "add " + std::to_string(cq[k].context) + " completed twice or is unknown");
          }
          for (size_t k = 0; k < ni; ++k) {
            ANYEP_MP_CHECK(im[k].imm == kDone, "unexpected immediate " + std::to_string(im[k].imm));
            ++dones;
          }
        };
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        for (int k = 0; k < kRounds; ++k)
          for (uint32_t p = 0; p < n; ++p) {
            if (p == r.rank) continue;
            for (size_t i = 0; i < kWords; ++i) {
              const uint64_t v = i + 1 == kWords ? ~0ull : r.rank + 1;
              const transport::AtomicAddDesc a{p, id, 8 * i, v, posted};
              int rc;
              while ((rc = t->post_atomic_add(a)) == -EAGAIN) {
                ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "adds kept getting -EAGAIN");
                drain();
              }
              ANYEP_MP_CHECK(rc == 0, "post_atomic_add: " + t->last_error());
              ++posted;
            }
          }
        // Keep polling (tcp;ofi_rxm applies adds in the target's progress) until every own add
        // completed (applied at its target: delivery complete), then say so to every peer; stop
        // once every peer said so, i.e. every add aimed here has been applied.
        while (!(done_sent && dones == n - 1 && done_comps == n - 1)) {
          ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "rank " + std::to_string(r.rank) + ": " +
                                                                          std::to_string(dones) + " of " +
                                                                          std::to_string(n - 1) + " peers done");
          drain();
          uint64_t got = 0;
          for (uint64_t j = 0; j < posted; ++j) got += completed[j];
          if (!done_sent && got == posted) {
            for (uint32_t p = 0; p < n; ++p)
              if (p != r.rank) {
                int rc;
                while ((rc = t->post_imm(p, kDone, UINT64_MAX)) == -EAGAIN) {
                  ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "'done' kept getting -EAGAIN");
                  drain();
                }
                ANYEP_MP_CHECK(rc == 0, t->last_error());
              }
            done_sent = true;
          }
        }
        uint64_t others = 0;
        for (uint32_t s = 0; s < n; ++s)
          if (s != r.rank) others += s + 1;
        for (size_t i = 0; i + 1 < kWords; ++i)
          ANYEP_MP_CHECK(__atomic_load_n(&words[i], __ATOMIC_SEQ_CST) == kRounds * others,
                         "word " + std::to_string(i) + " = " + std::to_string(static_cast<int64_t>(words[i])) +
                             ", want " + std::to_string(kRounds * others) + " (words " +
                             std::to_string(static_cast<int64_t>(words[0])) + " " +
                             std::to_string(static_cast<int64_t>(words[1])) + " " +
                             std::to_string(static_cast<int64_t>(words[2])) + " " +
                             std::to_string(static_cast<int64_t>(words[3])) + ")");
        ANYEP_MP_CHECK(static_cast<int64_t>(__atomic_load_n(&words[kWords - 1], __ATOMIC_SEQ_CST)) ==
                           -static_cast<int64_t>(kRounds) * (n - 1),
                       "the -1 word is " + std::to_string(static_cast<int64_t>(words[kWords - 1])));
        // Bad targets are refused before the wire, naming what was wrong.
        ANYEP_MP_CHECK(t->post_atomic_add({(r.rank + 1) % n, id, 4, 1, 0}) == -EINVAL &&
                           t->last_error().find("not 8-byte aligned") != std::string::npos,
                       t->last_error());
        ANYEP_MP_CHECK(t->post_atomic_add({(r.rank + 1) % n, id, 8 * kWords, 1, 0}) == -EINVAL &&
                           t->last_error().find("past the end of region") != std::string::npos,
                       t->last_error());
        r.boot->barrier();
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

// The contract itself, seen from the initiator: when an add's completion arrives, the target's
// word already holds it. The words live in a page every rank shares (mapped before the ranks fork),
// so rank 0 reads rank 1's word the moment its completion arrives. Rank 1 first sleeps, without
// polling: shm and ofi_rxm apply an add in the target's progress, so a completion that only means
// "sent" (shm's plain add completes at post time) comes while the word is still 0.
TEST_P(Atomics, CompletionMeansAppliedAtTheTarget) {
  const Case c = GetParam();
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  ANYEP_REQUIRE_PROVIDER(transport::libfabric::provider_available(c.provider, &why), c.provider, why);
  constexpr size_t kPage = 4096, kSlot = 64;  // one cache line of words per rank
  void* page = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED) << "mmap of the shared page";
  auto* shared = static_cast<uint64_t*>(page);
  constexpr uint64_t kValue = 0x5eed;
  testkit::RunOptions opt;
  opt.timeout_s = 60;
  auto res = testkit::run_ranks(
      2,
      [&](testkit::Rank& r) {
        auto t = make_with_atomics(r, c);
        uint64_t* mine = shared + r.rank * (kSlot / 8);
        auto id = t->register_memory(mine, kSlot, transport::MemKind::kHost);
        transport::connect_all(*t, *r.boot, {id});
        transport::Completion cq[16];
        transport::ImmEvent im[16];
        size_t nc = 0, ni = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        auto poll_once = [&](const std::string& what) {
          ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "rank " + std::to_string(r.rank) + ": " + what);
          ANYEP_MP_CHECK(t->poll(cq, 16, &nc, im, 16, &ni) == 0, t->last_error());
        };
        auto poll_until = [&](auto done, const std::string& what) {
          do poll_once(what);
          while (!done());
        };
        auto send_imm = [&](uint32_t imm) {  // to rank 1, waiting for the immediate's own completion
          int rc;
          while ((rc = t->post_imm(1, imm, 100 + imm)) == -EAGAIN) poll_once("immediates kept getting -EAGAIN");
          ANYEP_MP_CHECK(rc == 0, t->last_error());
          poll_until([&] { return nc > 0; }, "immediate " + std::to_string(imm) + " never completed");
          ANYEP_MP_CHECK(nc == 1 && cq[0].context == 100 + imm, "one completion, the immediate's");
        };
        // Warm-up: shm and ofi_rxm connect on first use, in the target's progress; after this
        // immediate the add below needs nothing from rank 1 but applying it.
        if (r.rank == 0)
          send_imm(1);
        else
          poll_until([&] { return ni > 0; }, "the warm-up immediate never came");
        r.boot->barrier();
        if (r.rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));  // no progress here yet
          poll_until([&] { return ni > 0; }, "rank 0 never said it checked");
        } else {
          int rc;
          while ((rc = t->post_atomic_add({1, id, 0, kValue, 7})) == -EAGAIN) poll_once("the add kept getting -EAGAIN");
          ANYEP_MP_CHECK(rc == 0, "post_atomic_add: " + t->last_error());
          poll_until([&] { return nc > 0; }, "the add never completed");
          ANYEP_MP_CHECK(nc == 1 && cq[0].context == 7 && cq[0].status == 0, "one good completion of the add");
          // Acquire: pairs with the target's update of the shared word (a coherent page).
          const uint64_t seen = __atomic_load_n(&shared[kSlot / 8], __ATOMIC_ACQUIRE);
          ANYEP_MP_CHECK(seen == kValue, "the add completed but rank 1's word is " + std::to_string(seen) +
                                             ": the completion came before the add was applied");
          send_imm(2);
        }
        r.boot->barrier();
      },
      opt);
  ::munmap(page, kPage);
  ANYEP_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Transport, Atomics,
                         ::testing::Values(Case{"tcp;ofi_rxm", false}, Case{"tcp;ofi_rxm", true}, Case{"shm", false},
                                           Case{"shm", true}),
                         [](const auto& info) {
                           std::string p = info.param.provider;
                           return p.substr(0, p.find(';')) + (info.param.chaos ? "_chaos" : "");
                         });

// LibfabricConfig::delivery_complete (capabilities().placed_writes): a write's completion means its
// bytes are in the target's memory, which is what lets the proxy publish them with an atomic add
// posted after that completion. As above, the target's region is in a page both ranks share, so
// rank 0 reads it the moment the completion arrives; rank 1 sleeps first without polling (both
// providers place data in the target's progress). The twin without it is the reason it exists: the
// default completion comes while the target has not even looked (shm completes a small write with
// CQ data once it is queued for the target, tcp once it is in the socket), so the bytes are not
// there yet.
class Placement : public ::testing::TestWithParam<const char*> {};

void write_and_check_at_completion(const char* provider, bool delivery_complete) {
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  if (!transport::libfabric::provider_available(provider, &why)) GTEST_SKIP() << provider << ": " << why;
  constexpr size_t kPage = 16384, kBytes = 2048, kFlag = kPage - 64;
  void* page = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED) << "mmap of the shared page";
  auto* shared = static_cast<uint8_t*>(page);
  uint32_t* checked = reinterpret_cast<uint32_t*>(shared + kFlag);  // rank 0 looked (no transport needed)
  testkit::RunOptions opt;
  opt.timeout_s = 60;
  auto res = testkit::run_ranks(
      2,
      [&](testkit::Rank& r) {
        auto t = make(r, provider, false, false, delivery_complete);
        ANYEP_MP_CHECK(t->capabilities().placed_writes == delivery_complete, transport::libfabric::describe(*t));
        std::vector<uint8_t> src(kBytes);
        for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
        uint8_t* mine = shared + r.rank * (kPage / 4);  // rank 1's region: its quarter of the page
        auto dst = t->register_memory(mine, kBytes, transport::MemKind::kHost);
        auto from = t->register_memory(src.data(), kBytes, transport::MemKind::kHost);
        transport::connect_all(*t, *r.boot, {dst, from});
        transport::Completion cq[16];
        transport::ImmEvent im[16];
        size_t nc = 0, ni = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        auto poll_until = [&](auto done, const std::string& what) {
          do {
            ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "rank " + std::to_string(r.rank) + ": " + what);
            ANYEP_MP_CHECK(t->poll(cq, 16, &nc, im, 16, &ni) == 0, t->last_error());
          } while (!done());
        };
        // Warm-up (connections are made on first use, in the target's progress).
        if (r.rank == 0) {
          int rc;
          while ((rc = t->post_imm(1, 1, 1)) == -EAGAIN)
            poll_until([] { return true; }, "the warm-up kept getting -EAGAIN");
          ANYEP_MP_CHECK(rc == 0, t->last_error());
          poll_until([&] { return nc > 0; }, "the warm-up immediate never completed");
        } else {
          poll_until([&] { return ni > 0; }, "the warm-up immediate never came");
        }
        r.boot->barrier();
        const uint8_t* target = shared + kPage / 4;
        if (r.rank == 1) {
          if (delivery_complete) {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));  // no progress here yet
          } else {
            // No progress at all until rank 0 has looked (bounded).
            while (!__atomic_load_n(checked, __ATOMIC_ACQUIRE) && std::chrono::steady_clock::now() < deadline)
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          poll_until([&] { return std::memcmp(target, src.data(), kBytes) == 0; }, "the write never landed");
        } else {
          // A small write with an immediate (shm: inline, as the proxy's engine writes go) and a
          // larger one without (shm: a direct CMA copy by default; with delivery: SAR).
          for (const size_t len : {size_t{64}, kBytes}) {
            int rc;
            while ((rc = t->post_write({1, from, 0, dst, 0, len, len == 64, 5, len})) == -EAGAIN)
              poll_until([] { return true; }, "the write kept getting -EAGAIN");
            ANYEP_MP_CHECK(rc == 0, "post_write: " + t->last_error());
            poll_until([&] { return nc > 0; }, "the write never completed");
            ANYEP_MP_CHECK(nc == 1 && cq[0].context == len && cq[0].status == 0, "one good completion of the write");
            const bool there = std::memcmp(target, src.data(), len) == 0;
            if (delivery_complete)
              ANYEP_MP_CHECK(there, "a " + std::to_string(len) +
                                        "-byte write posted with delivery_complete completed before its bytes were at "
                                        "the target");
            else if (len == 64)  // the first, queued for the target, which has not polled since
              ANYEP_MP_CHECK(!there, "the default completion came after placement: the negative control has no fault");
          }
          __atomic_store_n(checked, 1u, __ATOMIC_RELEASE);
        }
        r.boot->barrier();
      },
      opt);
  ::munmap(page, kPage);
  ANYEP_EXPECT_RANKS_OK(res);
}

TEST_P(Placement, DeliveryCompleteWriteIsPlacedWhenItCompletes) { write_and_check_at_completion(GetParam(), true); }
TEST_P(Placement, DefaultCompletionComesBeforePlacement) { write_and_check_at_completion(GetParam(), false); }

INSTANTIATE_TEST_SUITE_P(Transport, Placement, ::testing::Values("tcp;ofi_rxm", "shm"), [](const auto& info) {
  const std::string p = info.param;
  return p.substr(0, p.find(';'));
});

TEST(AtomicsOff, WithoutAskingThereAreNoneAndThePostSaysHowToAsk) {
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  ANYEP_REQUIRE_PROVIDER(transport::libfabric::provider_available("shm", &why), "shm", why);
  transport::libfabric::LibfabricConfig cfg;
  cfg.provider = "shm";
  cfg.want_hmem = false;
  auto t = transport::libfabric::make_libfabric_transport(0, 1, cfg);
  EXPECT_FALSE(t->capabilities().native_atomics);
  EXPECT_EQ(t->post_atomic_add({0, 0, 0, 1, 0}), -EOPNOTSUPP);
  EXPECT_NE(t->last_error().find("want_atomics"), std::string::npos) << t->last_error();
  EXPECT_NE(transport::libfabric::describe(*t).find("native_atomics=no (not asked for"), std::string::npos)
      << transport::libfabric::describe(*t);
}

}  // namespace
}  // namespace anyep
