// anyep/testkit/mp_harness.h — run a function as n processes on localhost.
//
//   auto res = anyep::testkit::run_ranks(4, [](anyep::testkit::Rank& r) {
//     // r.rank, r.size, r.boot (a TCP bootstrap on 127.0.0.1, already joined), r.port
//     ANYEP_MP_CHECK(r.boot->allgather({1}).size() == 4, "allgather shape");
//   });
//   ANYEP_EXPECT_RANKS_OK(res);  // gtest: skip if any rank skipped, else expect all ok
//
// Each rank is a forked child of the test process. A rank fails by throwing (any exception; its
// what() is reported), skips by throwing mp::Skip("why"), and passes by returning. The parent
// waits at most RunOptions::timeout_s, then kills stragglers (SIGKILL) and reports them by rank.
// Children never return into the test framework: they _exit() with their status.
// Do not use gtest assertions inside ranks (they would not reach the parent); use ANYEP_MP_CHECK.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::testkit {

// Thrown inside a rank to skip the whole run (e.g. a libfabric provider this machine lacks).
struct Skip : std::runtime_error {
  explicit Skip(const std::string& why) : std::runtime_error(why) {}
};

struct Rank {
  uint32_t rank = 0;
  uint32_t size = 0;
  uint16_t port = 0;  // the bootstrap port on 127.0.0.1 (rank 0 serves it)
  // Joined TCP bootstrap, or null when RunOptions::bootstrap is false (then the rank may build its
  // own with transport::make_tcp_bootstrap("127.0.0.1", port, ...), or not join at all).
  std::unique_ptr<transport::Bootstrap> boot;
};

struct RunOptions {
  double timeout_s = 60;            // whole run; stragglers are killed after it
  double bootstrap_timeout_s = 20;  // each bootstrap wait
  bool bootstrap = true;            // join a TCP bootstrap before calling fn
};

struct RankOutcome {
  enum class Status { kOk, kFailed, kSkipped, kKilled, kCrashed };
  uint32_t rank = 0;
  Status status = Status::kOk;
  std::string message;  // failure / skip reason, or how it died
};

struct RunResult {
  std::vector<RankOutcome> ranks;
  bool ok() const;       // every rank returned normally
  bool skipped() const;  // some rank skipped (and none failed)
  std::string skip_reason() const;
  std::string summary() const;  // one line per rank that did not pass
};

RunResult run_ranks(uint32_t n, const std::function<void(Rank&)>& fn, const RunOptions& opt = {});

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and released).
uint16_t free_tcp_port();

}  // namespace anyep::testkit

// Inside a rank: throw with file:line and a message when cond is false.
#define ANYEP_MP_CHECK(cond, msg)                                                                   \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) +              \
                               ": check failed: " #cond ": " + std::string(msg));                   \
  } while (0)

// In the gtest body: skip when a rank skipped, otherwise require every rank to pass.
#define ANYEP_EXPECT_RANKS_OK(res)                                          \
  do {                                                                     \
    const auto& _r = (res);                                                \
    if (_r.skipped()) GTEST_SKIP() << _r.skip_reason();                    \
    EXPECT_TRUE(_r.ok()) << _r.summary();                                  \
  } while (0)
