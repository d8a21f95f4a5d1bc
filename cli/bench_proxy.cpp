// anyep bench proxy (alias: anyep_main) — the README's main job. Without a GPU it runs the proxy
// pipeline end to end across
// local processes: CPU producers (playing GPU warps) -> channel rings -> proxy threads ->
// transport (libfabric shm or tcp on 127.0.0.1) -> ordering engine -> counters, where an
// observer thread (playing the receiving kernel) checks every byte a signal vouches for, acks it,
// and the run ends with exact signal counts (bench/kit/workload.h). `--provider loopback` runs
// the ranks as threads of this process over the in-process loopback transport instead; a
// libfabric provider that is not available is an error, never a silent fallback.
//
// The ranks are forked children (benchkit::run_ranks, bench/kit/mp_harness.h): a rank killed by a signal or stopped
// (no heartbeat for --liveness-s) ends the job at once with an error naming it, the others are
// killed, the ranks die with this process, and a dead rank's shm files are removed.
// The results table (and --json, --plot) comes from cli/report.h; a progress line every few
// seconds goes to stderr while the ranks run.
// Exit status: 0 OK, 1 the job failed, 2 bad command line or provider not available.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "bench/kit/local_cluster.h"
#include "bench/kit/mp_harness.h"
#include "bench/kit/workload_rank.h"
#include "commands.h"
#include "common/error.h"
#include "common/parse.h"
#include "report.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/factory.h"

namespace anyep::cli {

using namespace anyep::proxy;
using namespace anyep::benchkit;

namespace {

struct Summary {  // what one rank reports to the parent
  uint64_t commands = 0, bytes = 0, retired = 0, held = 0, native = 0;
  double seconds = 0;
  uint32_t bypass = 0, n_rt = 0, n_quiet = 0;
};

Command command(const char* prog) {
  static std::string usage;
  usage = std::string(prog) + " [options]";
  return Command{
      usage.c_str(),
      "The CPU proxy pipeline across local processes, no GPU used: producers (playing GPU warps) -> channel\n"
      "rings -> proxy threads -> transport -> ordering engine -> counters; every byte a signal vouches for is\n"
      "checked by its receiver, and the run ends with exact signal counts.",
      with_output_options(
          {{"--ranks", "R", "processes (ranks), 1..64 [4]"},
           {"--threads", "T", "proxy threads per rank, 1..4 [2]"},
           {"--provider", "P", "shm | tcp (libfabric, a process per rank) | loopback (threads of one process) [shm]"},
           {"--rounds", "N", "LL rounds per producer, 1..10000000 (HT chunks: 2N) [1000]"},
           {"--seed", "S", "workload seed, 0..2^64-1 [20261122]"},
           {"--timeout-s", "S", "data-path wait limit in a rank, seconds (0, 3600] [25]"},
           {"--liveness-s", "S", "a rank without heartbeat this long is reported stopped, (0, 3600] [10]"},
           {"--job-timeout-s", "S", "the whole job, seconds (0, 86400] [3600]"}},
          "plot the latency percentiles (needs python3 with matplotlib)"),
      "exit status: 0 passed, 1 the job failed, 2 bad command line or provider not available\n"};
}

// Summary, then the two sample arrays: what a rank hands back to the parent.
std::string pack(const Summary& s, const std::vector<uint64_t>& rt, const std::vector<uint64_t>& q) {
  std::string b(reinterpret_cast<const char*>(&s), sizeof s);
  b.append(reinterpret_cast<const char*>(rt.data()), rt.size() * 8);
  b.append(reinterpret_cast<const char*>(q.data()), q.size() * 8);
  return b;
}
bool unpack(const std::string& b, Summary& s, std::vector<uint64_t>& rt, std::vector<uint64_t>& q) {
  if (b.size() < sizeof s) return false;
  std::memcpy(&s, b.data(), sizeof s);
  if (b.size() != sizeof s + 8ull * (s.n_rt + s.n_quiet)) return false;
  const size_t at = rt.size();
  rt.resize(at + s.n_rt);
  std::memcpy(rt.data() + at, b.data() + sizeof s, 8ull * s.n_rt);
  const size_t qt = q.size();
  q.resize(qt + s.n_quiet);
  std::memcpy(q.data() + qt, b.data() + sizeof s + 8ull * s.n_rt, 8ull * s.n_quiet);
  return true;
}

double pct(std::vector<uint64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[std::min(v.size() - 1, size_t(p * static_cast<double>(v.size())))]) / 1e3;
}

// The results: a table of what was measured, the raw figures, a latency plot.
Report report(const std::vector<Summary>& s, const std::vector<uint64_t>& rt, const std::vector<uint64_t>& quiet,
              double wall_s, bool quiet_data_checked, const std::string& engine) {
  uint64_t cmds = 0, bytes = 0, held = 0, native = 0;
  double slowest = 0;
  for (const Summary& x : s)
    cmds += x.commands, bytes += x.bytes, held += x.held, native += x.native, slowest = std::max(slowest, x.seconds);
  Report r;
  r.bench = "proxy";
  // Honest about QUIET: its completion is always checked; its data check (the bytes at the destination
  // right after it retires) needs the destination's buffer in this process (a peek): in-process only.
  r.title = std::string(
                "  result: OK (every signal's bytes verified by its receiver, counts exact, barriers and QUIET "
                "completion checked; ") +
            (quiet_data_checked ? "QUIET's data check too: every QUIET's bytes were in place when it retired"
                                : "QUIET's data check not run: it needs the ranks in one process") +
            ")";
  const double mcmds = cmds / slowest / 1e6, gbps = bytes / slowest / 1e9;
  r.table.columns = {"metric", "value", "unit"};
  r.table.rows = {{"commands", cmds, "across " + std::to_string(s.size()) + " ranks"},
                  {"run time (slowest rank)", slowest, "s"},
                  {"command rate", mcmds, "M commands/s"},
                  {"payload", gbps, "GB/s"},
                  {"signals held by the ordering engine", held, "until their writes landed"},
                  {"signals as native atomic adds", native, "ANYEP_PROXY_ATOMICS=native"},
                  {"LL round trip p50", pct(rt, 0.5), "us"},
                  {"LL round trip p90", pct(rt, 0.9), "us"},
                  {"LL round trip p99", pct(rt, 0.99), "us"},
                  {"QUIET p50", pct(quiet, 0.5), "us"},
                  {"QUIET p99", pct(quiet, 0.99), "us"},
                  {"wall time (setup included)", wall_s, "s"}};
  r.notes = {"ordering engine: " + engine, "LL round trip: count signal -> remote check -> ack, " +
                                               std::to_string(rt.size()) + " samples; QUIET: push -> retired, " +
                                               std::to_string(quiet.size()) + " samples"};
  r.results.set("commands", cmds);
  r.results.set("payload_bytes", bytes);
  r.results.set("seconds", slowest);
  r.results.set("mcommands_per_s", mcmds);
  r.results.set("payload_GBps", gbps);
  r.results.set("signals_held", held);
  r.results.set("signals_native", native);
  r.results.set("ordering_engine", engine);
  r.results.set("quiet_data_checked", quiet_data_checked);
  Json lat = Json::object();
  for (double p : {0.5, 0.9, 0.99}) {
    const std::string k = "p" + std::to_string(static_cast<int>(p * 100));
    lat.set("ll_round_trip_" + k + "_us", pct(rt, p));
    lat.set("quiet_" + k + "_us", pct(quiet, p));
  }
  lat.set("ll_round_trip_samples", static_cast<uint64_t>(rt.size()));
  lat.set("quiet_samples", static_cast<uint64_t>(quiet.size()));
  r.results.set("latency", lat);
  r.results.set("wall_s", wall_s);
  Plot plot{"proxy pipeline latency", "percentile", "us", false, true, {}};
  Series a{"LL round trip", {}, {}}, q{"QUIET", {}, {}};
  for (double p : {0.5, 0.9, 0.99}) {
    const std::string k = "p" + std::to_string(static_cast<int>(p * 100));
    a.x.push_back(k), a.y.push_back(pct(rt, p));
    q.x.push_back(k), q.y.push_back(pct(quiet, p));
  }
  plot.series = {a, q};
  r.plots.push_back(plot);
  return r;
}

// The run's configuration in the JSON document.
Report with_config(Report r, uint32_t ranks, uint32_t threads, const std::string& provider, const WorkloadConfig& w) {
  r.config.set("ranks", ranks);
  r.config.set("threads", threads);
  r.config.set("provider", provider);
  r.config.set("producers", w.producers);
  r.config.set("ll_rounds", w.ll_rounds);
  r.config.set("ht_chunks", w.ht_chunks);
  r.config.set("seed", w.seed);
  r.config.set("timeout_s", w.timeout_s);
  return r;
}

}  // namespace

int bench_proxy(int argc, char** argv, int first, const char* prog, const EndpointMaker& make_endpoint) {
  uint32_t ranks = 4, threads = 2;
  std::string provider = "shm";
  WorkloadConfig w;
  w.producers = 3;
  w.ll_rounds = 1000;
  w.ht_chunks = 2000;
  w.max_tokens = 8;
  w.token_max = 7168;  // DeepEP's FP8 token at hidden 7168
  w.ht_slots = 16;
  w.chunk_max = 8192;
  w.quiet_every = 32;
  w.seed = 20261122;
  w.timeout_s = 25;
  double liveness_s = 10, job_timeout_s = 3600;
  const Command cmd = command(prog);
  OutputOptions out;
  const auto each = [&](const std::string& a, const std::string& v) {
    if (a == "--ranks") ranks = uint32_t(parse_count(a, v, 1, 64));
    if (a == "--threads") threads = uint32_t(parse_count(a, v, 1, w.producers + 1));
    if (a == "--provider") provider = parse_choice(a, v, {"shm", "tcp", "loopback"});
    if (a == "--rounds") w.ll_rounds = uint32_t(parse_count(a, v, 1, 10000000)), w.ht_chunks = 2 * w.ll_rounds;
    if (a == "--seed") w.seed = parse_count(a, v, 0, UINT64_MAX);
    if (a == "--timeout-s") w.timeout_s = parse_seconds(a, v, 1e-3, 3600);
    if (a == "--liveness-s") liveness_s = parse_seconds(a, v, 1e-3, 3600);
    if (a == "--job-timeout-s") job_timeout_s = parse_seconds(a, v, 1e-3, 86400);
    read_output_option(out, a, v);
  };
  if (const auto rc = parse_command(cmd, argc, argv, first, prog, each)) return *rc;
  w.ranks = ranks;
  ::setenv("FI_TCP_IFACE", "lo", 0);  // 127.0.0.1 only
  // No silent fallback: loopback only when asked for by name.
  if (std::string why; provider != "loopback" && !transport::available(provider, &why)) {
    std::fprintf(
        stderr,
        "%s: --provider %s is not available here: %s\n"
        "  (--provider loopback runs the ranks as threads of one process over the in-process loopback transport)\n",
        prog, provider.c_str(), why.c_str());
    return kExitUsage;
  }

  FILE* const text = human(out);
  const std::string command_line = join_args(argc, argv);
  std::fprintf(text,
               "%s: CPU-only proxy pipeline (no GPU used): producers -> rings -> proxies -> transport -> "
               "ordering engine -> counters\n",
               prog);
  std::fprintf(
      text,
      "  seed %llu, %u ranks x (%u producer warps + 1 observer), %u proxy threads per rank, LL %u rounds of <= %u x %u "
      "B "
      "tokens, HT %u chunks of <= %u B per producer\n",
      (unsigned long long)w.seed, ranks, w.producers, threads, w.ll_rounds, w.max_tokens, w.token_max, w.ht_chunks,
      w.chunk_max);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // ANYEP_CHAOS_SEED wraps every endpoint in the chaos transport (reordered deliveries), on every
    // provider, loopback included.
    const std::optional<transport::chaos::ChaosConfig> chaos = transport::chaos::ChaosConfig::from_env();
    if (chaos)
      std::fprintf(text, "  chaos transport: seed %llu, max delay %u polls (ANYEP_CHAOS_SEED, ANYEP_CHAOS_MAX_DELAY)\n",
                   (unsigned long long)chaos->seed, chaos->max_delay);
    if (provider == "loopback") {
      std::fprintf(text, "  transport: in-process loopback, ranks are threads of this process (--provider loopback)\n");
      LocalClusterConfig lc;
      lc.ranks = ranks;
      lc.threads = threads;
      lc.rings = StreamWorkload::num_rings(w);
      lc.buffer_bytes = StreamWorkload::buffer_bytes(w);
      lc.num_counters = StreamWorkload::num_counters(w);
      lc.proxy = ProxyConfig::from_env();
      lc.proxy.num_tags = StreamWorkload::num_tags(w);
      if (chaos)
        lc.endpoints = [loop = loopback_factory(ranks, threads), c = *chaos](uint32_t rank, uint32_t thread) {
          return transport::chaos::make_chaos_transport(loop(rank, thread), c);
        };
      LocalCluster cl(lc);
      cl.start();
      std::vector<Summary> sums(ranks);
      std::vector<WorkloadResult> res(ranks);
      std::vector<std::exception_ptr> errs(ranks);
      std::vector<std::thread> th;
      for (uint32_t r = 0; r < ranks; ++r)
        th.emplace_back([&, r] {
          try {
            StreamWorkload wl(w, r, cl.rank(r).bytes(), cl.rank(r).counters.get(), *cl.rank(r).channel,
                              [&cl](uint32_t peer) -> const uint8_t* { return cl.rank(peer).bytes(); });
            const auto s0 = std::chrono::steady_clock::now();
            res[r] = wl.run([&] { cl.rank(r).proxy->check(); });
            sums[r].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
          } catch (...) {
            errs[r] = std::current_exception();
          }
        });
      {
        Ticker progress(prog, std::to_string(ranks) + " ranks (threads) running " + std::to_string(w.ll_rounds) +
                                  " LL rounds per producer");
        for (auto& t : th) t.join();
      }
      // A data violation is the error reported, ahead of the timeouts it causes in other ranks.
      if (std::exception_ptr e = first_by_precedence(errs)) std::rethrow_exception(e);
      cl.stop();
      cl.check();
      std::vector<uint64_t> rt, q;
      for (uint32_t r = 0; r < ranks; ++r) {
        sums[r].commands = res[r].commands;
        sums[r].bytes = res[r].payload_bytes;
        sums[r].held = cl.rank(r).proxy->stats().signals_held;
        sums[r].native = cl.rank(r).proxy->stats().signals_native;
        rt.insert(rt.end(), res[r].ll_round_trip_ns.begin(), res[r].ll_round_trip_ns.end());
        q.insert(q.end(), res[r].quiet_ns.begin(), res[r].quiet_ns.end());
      }
      const Report rep = report(
          sums, rt, q, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), true,
          cl.rank(0).proxy->bypass() ? "bypassed (loopback lands writes in order)" : "on (the transport may reorder)");
      return emit(with_config(rep, ranks, threads, provider, w), out, command_line) ? kExitOk : kExitFailed;
    }
    std::fprintf(text, "  transport: libfabric %s, every rank its own process, TCP bootstrap on 127.0.0.1\n",
                 provider.c_str());
    benchkit::RunOptions opt;
    opt.bootstrap_timeout_s = 20;
    opt.timeout_s = job_timeout_s;
    opt.liveness_s = liveness_s;
    opt.kill_all_on_failure = true;  // one failed rank fails the job: the others need not time out
    // Progress starts once every rank is forked (no thread of ours exists across a fork).
    std::optional<Ticker> progress;
    opt.on_started = [&](const std::vector<pid_t>& pids) {
      std::fprintf(text, "  ranks' pids:");
      for (size_t r = 0; r < pids.size(); ++r) std::fprintf(text, " %zu:%d", r, int(pids[r]));
      std::fprintf(text, "\n");
      std::fflush(text);
      progress.emplace(prog, std::to_string(ranks) + " ranks (processes) running " + std::to_string(w.ll_rounds) +
                                 " LL rounds per producer");
    };
    auto res = benchkit::run_ranks(
        ranks,
        [&](benchkit::Rank& r) {
          RankRun run = run_workload_rank(w, ProxyConfig::from_env(), threads, *r.boot, [&](uint32_t) {
            return make_endpoint(transport::TransportSpec::from_env(provider, r.rank, ranks));
          });
          Summary s{run.result.commands,
                    run.result.payload_bytes,
                    run.stats.commands,
                    run.stats.signals_held,
                    run.stats.signals_native,
                    run.seconds,
                    run.bypass,
                    uint32_t(run.result.ll_round_trip_ns.size()),
                    uint32_t(run.result.quiet_ns.size())};
          r.result = pack(s, run.result.ll_round_trip_ns, run.result.quiet_ns);
        },
        opt);
    progress.reset();
    std::vector<Summary> sums(ranks);
    std::vector<uint64_t> rt, q;
    bool ok = res.ok();
    for (uint32_t r = 0; ok && r < ranks; ++r) ok = unpack(res.ranks[r].result, sums[r], rt, q);
    if (!ok) {
      if (res.culprit >= 0)
        std::fprintf(stderr, "%s: FAILED after %.2f s: %s\n", prog, res.seconds_to_culprit,
                     res.culprit_message.c_str());
      else
        std::fprintf(stderr, "%s: FAILED\n", prog);
      std::fprintf(stderr, "%s", res.summary().c_str());
      return kExitFailed;
    }
    const Report rep =
        report(sums, rt, q, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), false,
               sums[0].bypass ? "bypassed (the provider lands writes in order)" : "on (the provider may reorder)");
    return emit(with_config(rep, ranks, threads, provider, w), out, command_line) ? kExitOk : kExitFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return kExitFailed;
  }
}

}  // namespace anyep::cli
