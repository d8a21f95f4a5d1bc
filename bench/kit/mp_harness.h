// anyep/bench/kit/mp_harness.h — run a function as n processes on localhost (the multi-process
// benchmarks and the main job; tests reach it through testkit/mp_harness.h, which adds a gtest
// macro).
//
//   auto res = anyep::benchkit::run_ranks(4, [](anyep::benchkit::Rank& r) {
//     // r.rank, r.size, r.boot (a TCP bootstrap on 127.0.0.1, already joined), r.port
//     ANYEP_MP_CHECK(r.boot->allgather({1}).size() == 4, "allgather shape");
//   });
//
// Each rank is a forked child of the calling process. A rank fails by throwing (any exception; its
// what() is reported), skips by throwing mp::Skip("why"), and passes by returning. Children never
// return into the test framework: they _exit() with their status.
// Do not use gtest assertions inside ranks (they would not reach the parent); use ANYEP_MP_CHECK.
//
// The parent never blocks without a deadline (poll() on the children's pipes):
//  - a rank killed by a signal is reported by rank and signal name at once;
//  - a rank that stops (kill -STOP, a stall of the whole process) stops its heartbeat (a thread
//    bumping a counter in anonymous shared memory every 100 ms) and is reported after
//    RunOptions::liveness_s, then killed;
//  - after such a culprit (or any failure with kill_all_on_failure) the other ranks get
//    kill_grace_s to end on their own, then SIGKILL; their messages name the culprit;
//  - after timeout_s every straggler is killed and reported by rank.
// Children die with the parent (PR_SET_PDEATHSIG; the thread that calls run_ranks must outlive
// the run), and the libfabric shm provider's /dev/shm files of a rank that did not exit normally
// ("<pid>:<endpoint>:<n>") are removed. Rank 0's bootstrap socket is bound before any rank starts
// (no free-port race) and every hello carries a per-run secret.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::benchkit {

// Thrown inside a rank to skip the whole run (e.g. a libfabric provider this machine lacks).
struct Skip : std::runtime_error {
  explicit Skip(const std::string& why) : std::runtime_error(why) {}
};

struct Rank {
  uint32_t rank = 0;
  uint32_t size = 0;
  uint16_t port = 0;  // the bootstrap port on 127.0.0.1 (rank 0 serves it)
  // Joined TCP bootstrap, or null when RunOptions::bootstrap is false (then the rank may join
  // with join(), or not join at all).
  std::unique_ptr<transport::Bootstrap> boot;
  // Bytes handed back to the parent when fn returns (RankOutcome::result), any size.
  std::string result;

  // Joins the run's TCP bootstrap (rank 0: on the socket the parent bound; every rank: the run's
  // secret). Rank 0 can join once.
  std::unique_ptr<transport::Bootstrap> join(double timeout_s);

  int listen_fd = -1;  // rank 0 until it joins: the bound, listening bootstrap socket
  std::string secret;  // the run's bootstrap secret
};

struct RunOptions {
  double timeout_s = 60;            // whole run; stragglers are killed after it
  double bootstrap_timeout_s = 20;  // each bootstrap wait
  bool bootstrap = true;            // join a TCP bootstrap before calling fn
  // A rank whose heartbeat stops for this long (kill -STOP, a stalled process) is reported and
  // killed. Well under the data-path timeouts (ANYEP_TIMEOUT_S), yet far above a heartbeat delay
  // on a loaded 2-core machine under TSan.
  double liveness_s = 10;
  double kill_grace_s = 1;           // after a culprit, the others may end on their own this long
  bool kill_all_on_failure = false;  // a failing rank (not only a crashed or stalled one) ends the run
  // Called in the parent once every rank is started, with their pids by rank (fault injection).
  std::function<void(const std::vector<pid_t>&)> on_started;
};

struct RankOutcome {
  enum class Status { kOk, kFailed, kSkipped, kKilled, kCrashed, kStalled };
  uint32_t rank = 0;
  pid_t pid = -1;
  Status status = Status::kOk;
  std::string message;  // failure / skip reason, or how it died
  std::string result;   // Rank::result of a rank that returned
};

struct RunResult {
  std::vector<RankOutcome> ranks;
  int culprit = -1;                      // the first rank that crashed, stalled (or failed, with
  std::string culprit_message;           // kill_all_on_failure), and what happened to it
  double seconds_to_culprit = 0;         // from the start of the run to its detection
  std::vector<std::string> shm_removed;  // /dev/shm files of dead ranks the harness removed
  bool ok() const;                       // every rank returned normally
  bool skipped() const;                  // some rank skipped (and none failed)
  std::string skip_reason() const;
  std::string summary() const;  // one line per rank that did not pass
};

RunResult run_ranks(uint32_t n, const std::function<void(Rank&)>& fn, const RunOptions& opt = {});

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and released). Racy: prefer
// transport::tcp_bootstrap_listen with port 0, which keeps the socket.
uint16_t free_tcp_port();

// "SIGKILL", "SIGSEGV", ... ("signal N" for others).
std::string signal_name(int sig);

// The libfabric shm provider's /dev/shm files of process `pid` ("<pid>:..."); removes them when
// `remove`. Returns their names.
std::vector<std::string> shm_files_of(pid_t pid, bool remove);

}  // namespace anyep::benchkit

// Inside a rank: throw with file:line and a message when cond is false.
#define ANYEP_MP_CHECK(cond, msg)                                                                                     \
  do {                                                                                                                \
    if (!(cond))                                                                                                      \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": check failed: " #cond ": " + \
                               std::string(msg));                                                                     \
  } while (0)
