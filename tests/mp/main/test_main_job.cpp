// anyep_main (bench/main.cpp, the README's main job) run as a child process on a small workload:
// it must exit 0 and print its result line, with the QUIET data check where it can run, the
// ordering engine on under chaos, and every producer's samples (so every producer reached its
// end). In-process (loopback) and a process per rank (libfabric tcp, shm), with and without the
// chaos transport, and with signals as native atomic adds (ANYEP_PROXY_ATOMICS=native). Under the sanitizer builds
// every rank runs instrumented: a report fails the rank, hence the job, hence the test.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "../provider_required.h"
#include "testkit/child_process.h"
#include "testkit/tsan_transport.h"
#include "transport/factory.h"

namespace anyep {
namespace {

struct Case {
  const char* provider;  // shm | tcp | loopback
  uint32_t ranks, threads;
  const char* chaos_seed;  // "" : no chaos
  bool native = false;     // ANYEP_PROXY_ATOMICS=native: signals as the transport's remote atomic adds
};
void PrintTo(const Case& c, std::ostream* os) {  // the case in ctest's list, not its bytes
  *os << c.provider << " " << c.ranks << " ranks " << c.threads << " threads" << (*c.chaos_seed ? " chaos" : "")
      << (c.native ? " native atomics" : "");
}

// bench/main.cpp runs 3 producers per rank; a producer samples its LL round trip every 8 rounds
// and retires a QUIET every 32 operations (rounds + 2 x rounds HT chunks) and once at its end.
constexpr uint32_t kProducers = 3;
constexpr uint32_t kRounds = 16;

std::string line_with(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  if (at == std::string::npos) return "";
  const size_t begin = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

class MainJob : public ::testing::TestWithParam<Case> {};

TEST_P(MainJob, RunsToItsResultLine) {
  const Case c = GetParam();
  const std::string provider = c.provider;
  if (provider != "loopback") {
    std::string why;
    ANYEP_REQUIRE_PROVIDER(transport::available(provider, &why), provider, why);
  }
  const std::vector<std::string> args{"--provider",      provider,
                                      "--ranks",         std::to_string(c.ranks),
                                      "--threads",       std::to_string(c.threads),
                                      "--rounds",        std::to_string(kRounds),
                                      "--seed",          std::to_string(777 + c.ranks),
                                      "--timeout-s",     "40",
                                      "--job-timeout-s", "120"};
  // ANYEP_CHAOS_SEED empty: off, whatever the calling environment says.
  const std::string atomics = std::string("ANYEP_PROXY_ATOMICS=") + (c.native ? "native" : "emulated");
  const std::vector<std::string> env{"FI_TCP_IFACE=lo", std::string("ANYEP_CHAOS_SEED=") + c.chaos_seed, atomics};
  testkit::ChildProcess p = testkit::spawn_child(ANYEP_MAIN_PATH, args, env);
  std::string cmd = atomics + " ANYEP_CHAOS_SEED=" + c.chaos_seed + " " + ANYEP_MAIN_PATH;
  for (const auto& a : args) cmd += " " + a;
  const bool exited = testkit::wait_child(p, 150);
  const std::string all = "$ " + cmd + "\n--- stdout\n" + p.out_text + "--- stderr\n" + p.err_text;
  ASSERT_TRUE(exited) << "the main job did not end within 150 s (killed)\n" << all;
  ASSERT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0) << "the main job " << p.describe_status() << "\n"
                                                                 << all;
  EXPECT_NE(p.out_text.find("  result: OK (every signal's bytes verified by its receiver, counts exact"),
            std::string::npos)
      << all;
  if (provider == "loopback") {
    EXPECT_NE(p.out_text.find("transport: in-process loopback"), std::string::npos) << all;
    EXPECT_NE(p.out_text.find("QUIET's data check too: every QUIET's bytes were in place"), std::string::npos) << all;
  } else {
    EXPECT_NE(p.out_text.find("transport: libfabric " + provider + ", every rank its own process"), std::string::npos)
        << all;
    EXPECT_NE(p.out_text.find("QUIET's data check not run"), std::string::npos) << all;
  }
  if (*c.chaos_seed) {
    EXPECT_NE(p.out_text.find(std::string("chaos transport: seed ") + c.chaos_seed + ","), std::string::npos) << all;
    EXPECT_NE(p.out_text.find("ordering engine: on"), std::string::npos) << "chaos reorders: the engine must run\n"
                                                                         << all;
  } else {
    EXPECT_EQ(p.out_text.find("chaos transport"), std::string::npos) << all;
  }
  // Signals went as native adds exactly when asked (the row counts them over all ranks).
  const std::string native_row = line_with(p.out_text, "signals as native atomic adds");
  ASSERT_FALSE(native_row.empty()) << all;
  const size_t digit = native_row.find_first_of("0123456789");
  ASSERT_NE(digit, std::string::npos) << native_row;
  const unsigned long long native_adds = std::stoull(native_row.substr(digit));
  if (c.native)
    EXPECT_GT(native_adds, 0u) << all;
  else
    EXPECT_EQ(native_adds, 0u) << all;
  // Every producer of every rank ran to its end.
  const uint32_t producers = c.ranks * kProducers;
  const std::string rt =
      "LL round trip: count signal -> remote check -> ack, " + std::to_string(producers * (kRounds / 8)) + " samples";
  const std::string quiet =
      "QUIET: push -> retired, " + std::to_string(producers * (3 * kRounds / 32 + 1)) + " samples";
  EXPECT_NE(p.out_text.find(rt), std::string::npos) << "expected '" << rt << "'\n" << all;
  EXPECT_NE(p.out_text.find(quiet), std::string::npos) << "expected '" << quiet << "'\n" << all;
  EXPECT_EQ(p.err_text.find("Sanitizer"), std::string::npos) << all;
  std::printf("%s\n%s\n%s\n(%.1f s%s)\n", line_with(p.out_text, "result:").c_str(),
              line_with(p.out_text, "commands in").c_str(), line_with(p.out_text, "  ordering engine:").c_str(),
              p.seconds, testkit::tsan_build() ? ", TSan build" : "");
}

INSTANTIATE_TEST_SUITE_P(Job, MainJob,
                         ::testing::Values(Case{"loopback", 4, 2, ""}, Case{"loopback", 4, 3, "31"},
                                           Case{"shm", 4, 2, ""}, Case{"shm", 4, 2, "32"}, Case{"tcp", 2, 2, ""},
                                           Case{"tcp", 3, 2, "33"}, Case{"loopback", 3, 2, "34", true},
                                           Case{"shm", 3, 2, "35", true}, Case{"tcp", 2, 2, "", true}),
                         [](const auto& i) {
                           return std::string(i.param.provider) + "_" + std::to_string(i.param.ranks) + "ranks_" +
                                  std::to_string(i.param.threads) + "threads" + (*i.param.chaos_seed ? "_chaos" : "") +
                                  (i.param.native ? "_native" : "");
                         });

}  // namespace
}  // namespace anyep
