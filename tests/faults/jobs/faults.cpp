// anyep_faults — the fault-injection suite (ctest label `faults`, .ci/run's `faults` stage).
//
// Kills (SIGKILL) or stops (SIGSTOP) a random rank at a random point of
//  - the main job (anyep_main, a process per rank over libfabric tcp and shm, with and without
//    the chaos transport), and
//  - the multi-process proxy workload (testkit::run_ranks + run_workload_rank, as in
//    tests/mp/proxy), same providers and chaos,
// and feeds anyep_main bad command lines. Each case asserts: the job (or harness) ends within the
// bound, its error names the culprit rank and what happened to it, no rank outlives the job, and
// no /dev/shm file of the job's processes is left. Ends with a table: faults injected / detected /
// time to detect (p50, max) / leaks / orphans. (The hostile bootstrap clients are
// tests/faults/transport.)
//
//   anyep_faults --main PATH [--seed S] [--per-case N] [--only NAME]
// Every case prints its name and seed; `--only NAME --seed SEED` replays that one case.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/parse.h"
#include "testkit/child_process.h"
#include "testkit/mp_harness.h"
#include "testkit/workload_rank.h"
#include "transport/factory.h"

using namespace anyep;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kRanks = 3;
constexpr double kLiveness = 3;  // the liveness deadline the jobs run with here
constexpr double kGrace = 1;
// How long after the injection the job must be over: detection (at once for a signal, the
// liveness deadline for a stop) + the grace period + slack for a loaded 2-core machine.
double bound_s(int sig) { return (sig == SIGSTOP ? kLiveness : 0) + kGrace + 6; }

struct Row {
  int injected = 0, detected = 0, leaks = 0, orphans = 0, not_injected = 0;
  std::vector<double> detect_s;
};
std::map<std::string, Row> g_rows;  // by category, printed in the table
std::vector<std::string> g_failures;

void fail(const std::string& c, uint64_t seed, const std::string& why, const std::string& replay) {
  std::string m = "FAIL " + c + " seed " + std::to_string(seed) + ": " + why + "\n    replay: " + replay;
  std::printf("  %s\n", m.c_str());
  g_failures.push_back(m);
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A rank pid is an orphan if it still runs (a zombie waiting for init is fine) a moment later.
bool lingers(pid_t pid) {
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until) {
    if (::kill(pid, 0) != 0) return false;
    FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (!f) return false;
    char buf[512] = {};
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char* close = std::strrchr(buf, ')');
    if (n && close && close[1] == ' ' && close[2] == 'Z') return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);  // do not leave it to the next case
  return true;
}

// Counts (and removes, so the next case starts clean) /dev/shm files of the given processes.
int leaked_shm(const std::vector<pid_t>& pids, std::string* names) {
  int n = 0;
  for (pid_t p : pids)
    for (const auto& f : testkit::shm_files_of(p, true)) ++n, *names += " " + f;
  return n;
}

void record(const std::string& cat, const std::string& name, uint64_t seed, const std::string& replay, bool named,
            double detect, double bound, const std::vector<pid_t>& pids, const std::string& message) {
  Row& row = g_rows[cat];
  ++row.injected;
  if (named)
    ++row.detected, row.detect_s.push_back(detect);
  else
    fail(name, seed, "the error does not name the culprit:\n" + message, replay);
  if (detect > bound)
    fail(name, seed, "ended " + std::to_string(detect) + " s after the fault (bound " + std::to_string(bound) + " s)",
         replay);
  int orphans = 0;
  for (pid_t p : pids) orphans += lingers(p);
  if (orphans) row.orphans += orphans, fail(name, seed, std::to_string(orphans) + " rank(s) outlived the job", replay);
  std::string files;
  if (int n = leaked_shm(pids, &files)) row.leaks += n, fail(name, seed, "left in /dev/shm:" + files, replay);
  std::printf("  %-34s seed %-20llu %s after %.2f s\n", name.c_str(), (unsigned long long)seed,
              named ? "named" : "NOT NAMED", detect);
}

// ---- the main job -------------------------------------------------------------------------------

void main_job_case(const std::string& main_path, const std::string& provider, int sig, bool chaos, uint64_t seed,
                   const std::string& replay) {
  const std::string name = "main/" + provider + "/" + (sig == SIGKILL ? "kill" : "stop") + (chaos ? "/chaos" : "");
  const std::string cat = std::string("main job, ") + (sig == SIGKILL ? "kill -9" : "SIGSTOP");
  std::mt19937_64 rng(seed);
  const uint32_t victim = uint32_t(rng() % kRanks);
  const double delay = 0.05 + double(rng() % 1500) / 1000;  // setup, bootstrap or mid-run
  std::vector<std::string> env{"FI_TCP_IFACE=lo"};
  if (chaos) env.push_back("ANYEP_CHAOS_SEED=" + std::to_string(seed % 100000));
  testkit::ChildProcess p =
      testkit::spawn_child(main_path,
                           {"--ranks", std::to_string(kRanks), "--provider", provider, "--rounds", "200000", "--seed",
                            std::to_string(seed), "--liveness-s", std::to_string(kLiveness)},
                           env);
  bool exited = false;
  const auto t_start = Clock::now();
  std::vector<pid_t> pids;
  while (!exited && pids.empty() && since(t_start) < 60) {
    exited = testkit::pump(p, 20);
    if (size_t at = p.out_text.find("ranks' pids:");
        at != std::string::npos && p.out_text.find('\n', at) != std::string::npos) {
      std::string line = p.out_text.substr(at, p.out_text.find('\n', at) - at);
      for (size_t k = line.find(':', 12); k != std::string::npos; k = line.find(':', k + 1))
        pids.push_back(pid_t(std::atoll(line.c_str() + k + 1)));
    }
  }
  if (pids.size() != kRanks) {
    if (!exited) testkit::wait_child(p, 0);
    fail(name, seed, "anyep_main did not print its ranks' pids:\n" + p.out_text + p.err_text, replay);
    return;
  }
  const auto t_wait = Clock::now();
  while (!exited && since(t_wait) < delay) exited = testkit::pump(p, 20);
  const auto t_inject = Clock::now();
  if (exited || ::kill(pids[victim], sig) != 0) {
    ++g_rows[cat].not_injected;
    std::printf("  %-34s seed %-20llu job over before the fault\n", name.c_str(), (unsigned long long)seed);
    if (!exited) testkit::wait_child(p, 0);
    return;
  }
  const double bound = bound_s(sig);
  while (!exited && since(t_inject) < bound + 30) exited = testkit::pump(p, 20);
  const double detect = since(t_inject);
  if (!exited) {
    testkit::wait_child(p, 0);
    for (pid_t r : pids) ::kill(r, SIGKILL);
  }
  const std::string culprit = "rank " + std::to_string(victim) + " (pid " + std::to_string(pids[victim]) + ") " +
                              (sig == SIGKILL ? "was killed by signal 9 (SIGKILL)" : "stopped responding");
  const bool named =
      exited && WIFEXITED(p.status) && WEXITSTATUS(p.status) == 1 && p.err_text.find(culprit) != std::string::npos;
  pids.push_back(p.pid);
  record(cat, name, seed, replay, named, detect, bound, pids, p.err_text.empty() ? p.out_text : p.err_text);
}

// ---- the multi-process proxy workload (tests/mp/proxy) ------------------------------------------

void mp_case(const std::string& provider, int sig, bool chaos, uint64_t seed, const std::string& replay) {
  const std::string name = "mp-proxy/" + provider + "/" + (sig == SIGKILL ? "kill" : "stop") + (chaos ? "/chaos" : "");
  const std::string cat = std::string("mp proxy workload, ") + (sig == SIGKILL ? "kill -9" : "SIGSTOP");
  std::mt19937_64 rng(seed);
  const uint32_t victim = uint32_t(rng() % kRanks);
  const double delay = 0.05 + double(rng() % 1500) / 1000;
  testkit::RunOptions opt;
  opt.timeout_s = 120;
  opt.liveness_s = kLiveness;
  opt.kill_grace_s = kGrace;
  std::vector<pid_t> pids;
  std::atomic<bool> injected{false};
  Clock::time_point t_inject{};
  std::thread injector;
  opt.on_started = [&](const std::vector<pid_t>& p) {
    pids = p;
    injector = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      t_inject = Clock::now();
      injected = ::kill(pids[victim], sig) == 0;
    });
  };
  auto res = testkit::run_ranks(
      kRanks,
      [&](testkit::Rank& r) {
        testkit::WorkloadConfig w;
        w.seed = seed;
        w.ranks = r.size;
        w.producers = 2;
        w.ll_rounds = 200000;  // far longer than the fault's delay
        w.ht_chunks = 400000;
        w.timeout_s = 40;
        proxy::ProxyConfig pc;
        pc.timeout_ns = 40'000'000'000ull;
        pc.signal_slots = 16;
        testkit::run_workload_rank(w, pc, 2, *r.boot, [&](uint32_t thread) {
          transport::TransportSpec spec;
          spec.name = provider;
          spec.rank = r.rank;
          spec.num_ranks = r.size;
          if (chaos) {
            spec.chaos.emplace();
            spec.chaos->seed = seed + r.rank * 13 + thread;
          }
          return transport::make_transport(spec);
        });
      },
      opt);
  const double detect = since(t_inject);
  injector.join();
  if (!injected) {
    ++g_rows[cat].not_injected;
    std::printf("  %-34s seed %-20llu run over before the fault\n", name.c_str(), (unsigned long long)seed);
    return;
  }
  const bool named = res.culprit == int(victim) &&
                     res.culprit_message.find(sig == SIGKILL ? "SIGKILL" : "stopped responding") != std::string::npos;
  record(cat, name, seed, replay, named, detect, bound_s(sig), pids, res.summary());
}

// ---- bad command lines --------------------------------------------------------------------------

void cli_cases(const std::string& main_path) {
  struct Bad {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Bad> bad = {
      {{"--ranks", "abc"}, "--ranks='abc' is not a whole number"},
      {{"--ranks", "-1"}, "--ranks='-1'"},
      {{"--ranks", "4x"}, "--ranks='4x'"},
      {{"--ranks", "0"}, "--ranks='0' is out of range"},
      {{"--ranks", "100000"}, "--ranks='100000' is out of range"},
      {{"--threads", "0"}, "--threads='0' is out of range"},
      {{"--rounds", "1e9"}, "--rounds='1e9'"},
      {{"--seed", "-3"}, "--seed='-3'"},
      {{"--provider", "nosuch"}, "accepted: shm, tcp, loopback"},
      {{"--timeout-s", "-5"}, "--timeout-s='-5' is out of range"},
      {{"--timeout-s", "1e30"}, "--timeout-s='1e30' is out of range"},
      {{"--liveness-s", "nan"}, "--liveness-s='nan' is not a number"},
      {{"--ranks"}, "--ranks needs a value"},
      {{"--bogus", "1"}, "unknown option --bogus"},
  };
  Row& row = g_rows["bad command line"];
  for (const Bad& b : bad) {
    testkit::ChildProcess p = testkit::spawn_child(main_path, b.args);
    const bool exited = testkit::wait_child(p, 20);
    ++row.injected;
    std::string cmd = "anyep_main";
    for (const auto& a : b.args) cmd += " " + a;
    const bool ok =
        exited && WIFEXITED(p.status) && WEXITSTATUS(p.status) == 2 && p.err_text.find(b.expect) != std::string::npos;
    if (ok)
      ++row.detected, row.detect_s.push_back(p.seconds);
    else
      fail("cli", 0, cmd + ": expected exit 2 and '" + b.expect + "', got:\n" + p.err_text, cmd);
  }
  testkit::ChildProcess h = testkit::spawn_child(main_path, {"--help"});
  if (!(testkit::wait_child(h, 20) && WIFEXITED(h.status) && WEXITSTATUS(h.status) == 0 &&
        h.out_text.find("usage: anyep_main") != std::string::npos))
    fail("cli", 0, "anyep_main --help did not print the usage and exit 0", "anyep_main --help");
  std::printf("  %-34s %d of %zu refused with a message naming the value\n", "bad command lines", row.detected,
              bad.size());
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string main_path, only;
  uint64_t base = std::random_device{}();
  bool seeded = false;
  uint32_t per_case = 1;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (i + 1 >= argc) throw InvalidArgument(a + " needs a value");
      std::string v = argv[++i];
      if (a == "--main")
        main_path = v;
      else if (a == "--seed")
        base = parse_count(a, v, 0, UINT64_MAX), seeded = true;
      else if (a == "--per-case")
        per_case = uint32_t(parse_count(a, v, 1, 100));
      else if (a == "--only")
        only = v;
      else
        throw InvalidArgument("unknown option " + a);
    }
    if (main_path.empty()) throw InvalidArgument("--main PATH (the anyep_main binary) is required");
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "anyep_faults: %s\nusage: anyep_faults --main PATH [--seed S] [--per-case N] [--only NAME]\n",
                 e.what());
    return 2;
  }
  ::setenv("FI_TCP_IFACE", "lo", 1);
  std::printf("anyep_faults: base seed %llu%s; %u rank(s) per job, liveness deadline %.0f s, grace %.0f s\n",
              (unsigned long long)base, seeded ? "" : " (random)", kRanks, kLiveness, kGrace);
  std::vector<std::string> providers;
  for (const char* p : {"tcp", "shm"}) {
    std::string why;
    if (transport::available(p, &why))
      providers.push_back(p);
    else
      g_failures.push_back(std::string("provider ") + p + " is not available: " + why),
          std::printf("  FAIL provider %s: %s\n", p, why.c_str());
  }
  uint64_t k = 0;
  auto each = [&](const std::string& name, const std::function<void(uint64_t, const std::string&)>& fn) {
    for (uint32_t i = 0; i < per_case; ++i, ++k) {
      if (!only.empty() && only != name) continue;
      const uint64_t seed = only.empty() ? std::mt19937_64(base + k)() : base;  // --only: the seed as given
      fn(seed, "anyep_faults --main " + main_path + " --only " + name + " --seed " + std::to_string(seed));
    }
  };
  if (only.empty() || only == "cli") cli_cases(main_path);
  for (const auto& prov : providers)
    for (int sig : {SIGKILL, SIGSTOP})
      for (bool chaos : {false, true}) {
        const std::string tail = prov + "/" + (sig == SIGKILL ? "kill" : "stop") + (chaos ? "/chaos" : "");
        each("main/" + tail,
             [&](uint64_t s, const std::string& r) { main_job_case(main_path, prov, sig, chaos, s, r); });
        each("mp-proxy/" + tail, [&](uint64_t s, const std::string& r) { mp_case(prov, sig, chaos, s, r); });
      }

  std::printf("\n%-32s %9s %9s %11s %9s %6s %8s %13s\n", "fault", "injected", "detected", "detect p50", "max", "leaks",
              "orphans", "not injected");
  for (const auto& [cat, row] : g_rows)
    std::printf("%-32s %9d %9d %10.2fs %8.2fs %6d %8d %13d\n", cat.c_str(), row.injected, row.detected,
                pct(row.detect_s, 0.5), pct(row.detect_s, 1.0), row.leaks, row.orphans, row.not_injected);
  std::printf(
      "(detect: from the fault to the end of the job with the culprit named; bound: %.0f s for kill -9, %.0f s "
      "for SIGSTOP)\n",
      bound_s(SIGKILL), bound_s(SIGSTOP));
  if (!g_failures.empty()) {
    std::printf("\nanyep_faults: %zu failure(s):\n", g_failures.size());
    for (const auto& f : g_failures) std::printf("  %s\n", f.c_str());
    return 1;
  }
  std::printf("anyep_faults: OK\n");
  return 0;
}
