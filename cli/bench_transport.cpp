// anyep bench transport — the transport layer between two processes on this machine, through
// the same Transport interface the proxy uses (src/transport/transport.h): for each message size,
// bandwidth (K writes with an immediate, at most --window in flight, timed from the first post to
// the receiver's acknowledgement of the last) and latency (ping-pong of one write with an
// immediate each way; one-way = half the round trip). Every wait is bounded by --timeout-s.
// bench/transport/bench_transport.cpp compares the same writes with raw libfabric; this is the
// quick look.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "bench/kit/mp_harness.h"
#include "commands.h"
#include "common/error.h"
#include "common/fabric_providers.h"
#include "common/parse.h"
#include "report.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/factory.h"

namespace anyep::cli {
namespace {

using Clock = std::chrono::steady_clock;
using transport::Completion;
using transport::ImmEvent;
using transport::MrId;
using transport::Transport;
using transport::WriteDesc;

// --providers takes the libfabric transports (common/fabric_providers.h).
std::string fabric_transport(const std::string& opt, const std::string& name) {
  if (fabric::provider_of(name)) return name;
  throw InvalidArgument(parse_detail::quoted(opt, name) +
                        " is not accepted (accepted: " + fabric::transport_name_list() + ")");
}

const Command& command() {
  static const std::string providers_help =
      "comma list of " + fabric::transport_name_list() + " [shm,tcp] (unavailable ones are reported and skipped)";
  static const Command c{
      "anyep bench transport [options]",
      "Two processes on this machine (rank 0 sends, rank 1 answers) over an anyep transport: bandwidth and\n"
      "one-way latency for message sizes from --min to --max (x4 each step), with progress per size.",
      with_output_options(
          {{"--providers", "LIST", providers_help.c_str()},
           {"--min", "BYTES", "smallest message, 1..2^30 [64]"},
           {"--max", "BYTES", "largest message, 1..2^30 [4194304]"},
           {"--window", "W", "writes in flight in the bandwidth test, 1..1024 [64]"},
           {"--bytes-per-point", "BYTES", "bytes sent per size in the bandwidth test, 1..2^40 [67108864]"},
           {"--pingpongs", "N", "round trips per size in the latency test, 1..1000000 [1000]"},
           {"--timeout-s", "S", "longest wait for one message or acknowledgement, seconds (0, 3600] [30]"}},
          "plot bandwidth and latency by size (needs python3 with matplotlib)"),
      "exit status: 0 done, 1 failed, 2 bad command line, 77 none of the providers is available here\n"};
  return c;
}

struct Opts {
  std::vector<std::string> providers{"shm", "tcp"};
  uint64_t min_size = 64, max_size = 4u << 20, bytes_per_point = 64ull << 20;
  uint32_t window = 64, pingpongs = 1000;
  double timeout_s = 30;
};

struct Point {  // one message size, as rank 0 measured it
  uint64_t size = 0, msgs = 0;
  double seconds = 0, p50_ns = 0, p99_ns = 0;  // one-way latency (half a round trip)
};

struct Polled {
  size_t completions = 0, imms = 0;
};

// Polls local completions and the peer's immediates. A failed completion or poll throws.
Polled pump(Transport& t) {
  Completion c[64];
  ImmEvent im[64];
  Polled p;
  if (t.poll(c, 64, &p.completions, im, 64, &p.imms) != 0) throw std::runtime_error("poll: " + t.last_error());
  for (size_t i = 0; i < p.completions; ++i)
    if (c[i].status != 0) throw std::runtime_error("a write failed: " + t.last_error());
  return p;
}

// Posts one write (with an immediate), retrying on backpressure until the deadline. Returns the
// immediates that arrived while it waited.
size_t post(Transport& t, const WriteDesc& w, Clock::time_point deadline, const char* what) {
  size_t imms = 0;
  for (;;) {
    const int rc = t.post_write(w);
    if (rc == 0) return imms;
    if (rc != -EAGAIN) throw std::runtime_error(std::string("post_write (") + what + "): " + t.last_error());
    if (Clock::now() > deadline) throw std::runtime_error(std::string("backpressure did not clear: ") + what);
    imms += pump(t).imms;  // completions free the queue
  }
}

// Waits until `n` immediates arrived (counting into *got), polling; throws when none arrives for
// `timeout`.
void wait_imms(Transport& t, size_t n, size_t* got, Clock::duration timeout, const std::string& what) {
  auto deadline = Clock::now() + timeout;
  while (*got < n) {
    const size_t before = *got;
    *got += pump(t).imms;
    if (*got != before) deadline = Clock::now() + timeout;
    if (*got < n && Clock::now() > deadline)
      throw std::runtime_error("waited past --timeout-s for " + what + " (" + std::to_string(*got) + " of " +
                               std::to_string(n) + " arrived)");
  }
}

std::vector<uint64_t> sizes_of(const Opts& o) {
  std::vector<uint64_t> v;
  for (uint64_t s = o.min_size; s <= o.max_size; s *= 4) v.push_back(s);
  return v;
}

// One rank of one provider's run. Rank 0 returns its points as text lines.
std::string run_rank(const Opts& o, const std::string& prov, benchkit::Rank& r) {
  transport::TransportSpec spec = transport::TransportSpec::from_env(prov, r.rank, r.size);
  spec.chaos.reset();                // the transport itself, not the chaos wrapper
  spec.libfabric.want_hmem = false;  // host memory
  auto t = transport::make_transport(spec);
  std::vector<uint8_t> a(o.max_size, 1), b(o.max_size, 0);
  const MrId src = t->register_memory(a.data(), a.size(), transport::MemKind::kHost);
  const MrId dst = t->register_memory(b.data(), b.size(), transport::MemKind::kHost);
  transport::connect_all(*t, *r.boot, {src, dst});
  const uint32_t peer = 1 - r.rank;
  const bool sender = r.rank == 0;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  const std::vector<uint64_t> sizes = sizes_of(o);
  std::ostringstream result;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t size = sizes[i];
    const uint64_t k = std::clamp<uint64_t>(o.bytes_per_point / size, 16, 200000);
    WriteDesc w{peer, src, 0, dst, 0, size, true, 0, 0};
    // Bandwidth: rank 0 streams k writes; rank 1 acknowledges the last with an immediate.
    r.boot->barrier();
    const auto t0 = Clock::now();
    size_t got = 0;
    if (sender) {
      // At most `window` writes in flight, counted by local completions.
      uint64_t posted = 0, done = 0;
      auto deadline = Clock::now() + timeout;
      while (posted < k) {
        if (posted - done < o.window) {
          w.imm = static_cast<uint32_t>(posted);
          w.context = posted;
          const int rc = t->post_write(w);
          if (rc == 0) ++posted;
          if (rc != 0 && rc != -EAGAIN) throw std::runtime_error("post_write: " + t->last_error());
          if (rc == 0 && posted - done < o.window) continue;
        }
        const Polled p = pump(*t);
        done += p.completions;
        got += p.imms;
        if (p.completions) deadline = Clock::now() + timeout;
        if (Clock::now() > deadline) throw std::runtime_error("no write completed within --timeout-s");
      }
      wait_imms(*t, 1, &got, timeout, "the receiver's acknowledgement");
    } else {
      wait_imms(*t, k, &got, timeout, "the bandwidth test's writes");
      for (const auto deadline = Clock::now() + timeout;;) {  // an immediate without data
        const int rc = t->post_imm(peer, 0, 0);
        if (rc == 0) break;
        if (rc != -EAGAIN) throw std::runtime_error("post_imm (acknowledgement): " + t->last_error());
        if (Clock::now() > deadline) throw std::runtime_error("backpressure did not clear: acknowledgement");
        pump(*t);
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    // Latency: ping-pong.
    r.boot->barrier();
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(o.pingpongs, std::max<uint64_t>(k, 16)));
    std::vector<double> rtt;
    got = 0;
    for (uint32_t it = 0; it < n; ++it) {
      const auto s0 = Clock::now();
      if (sender) {
        got += post(*t, w, s0 + timeout, "ping");
        wait_imms(*t, it + 1, &got, timeout, "the pong");
        rtt.push_back(std::chrono::duration<double, std::nano>(Clock::now() - s0).count());
      } else {
        wait_imms(*t, it + 1, &got, timeout, "the ping");
        got += post(*t, w, Clock::now() + timeout, "pong");
      }
    }
    for (auto end = Clock::now() + std::chrono::milliseconds(50); Clock::now() < end;) pump(*t);  // last completions
    if (!sender) continue;
    std::sort(rtt.begin(), rtt.end());
    const double p50 = rtt[rtt.size() / 2] / 2, p99 = rtt[std::min(rtt.size() - 1, rtt.size() * 99 / 100)] / 2;
    result << size << ' ' << k << ' ' << seconds << ' ' << p50 << ' ' << p99 << '\n';
    std::fprintf(stderr, "[anyep bench transport] %s %llu B (%zu/%zu): %.3f GB/s, one-way p50 %.2f us\n", prov.c_str(),
                 static_cast<unsigned long long>(size), i + 1, sizes.size(),
                 static_cast<double>(k * size) / seconds / 1e9, p50 / 1e3);
  }
  r.boot->barrier();
  return result.str();
}

std::vector<Point> parse_points(const std::string& text) {
  std::vector<Point> v;
  std::istringstream in(text);
  Point p;
  while (in >> p.size >> p.msgs >> p.seconds >> p.p50_ns >> p.p99_ns) v.push_back(p);
  return v;
}

}  // namespace

int bench_transport(int argc, char** argv, int first) {
  const Command& cmd = command();
  OutputOptions out;
  Opts o;
  const auto each = [&](const std::string& a, const std::string& v) {
    if (a == "--providers") o.providers = split_list(v, [&](const std::string& p) { return fabric_transport(a, p); });
    if (a == "--min") o.min_size = parse_count(a, v, 1, 1ull << 30);
    if (a == "--max") o.max_size = parse_count(a, v, 1, 1ull << 30);
    if (a == "--window") o.window = static_cast<uint32_t>(parse_count(a, v, 1, 1024));
    if (a == "--bytes-per-point") o.bytes_per_point = parse_count(a, v, 1, 1ull << 40);
    if (a == "--pingpongs") o.pingpongs = static_cast<uint32_t>(parse_count(a, v, 1, 1000000));
    if (a == "--timeout-s") o.timeout_s = parse_seconds(a, v, 1e-3, 3600);
    read_output_option(out, a, v);
  };
  if (const auto rc = parse_command(cmd, argc, argv, first, "anyep bench transport", each)) return *rc;
  if (o.min_size > o.max_size) {
    std::fprintf(stderr, "anyep bench transport: --min=%llu is larger than --max=%llu\n",
                 static_cast<unsigned long long>(o.min_size), static_cast<unsigned long long>(o.max_size));
    return kExitUsage;
  }
  ::setenv("FI_TCP_IFACE", "lo", 0);  // 127.0.0.1 only
  Report r;
  r.bench = "transport";
  r.title = "transport between 2 processes: bandwidth (window " + std::to_string(o.window) +
            ") and one-way latency (half a ping-pong)";
  r.table.columns = {"provider", "size_B", "msgs", "GB/s", "Mmsg/s", "lat_p50_us", "lat_p99_us"};
  Plot bw{"bandwidth", "message size (bytes)", "GB/s", true, false, {}};
  Plot lat{"one-way latency (p50)", "message size (bytes)", "us", true, true, {}};
  int ran = 0;
  for (const std::string& prov : o.providers) {
    std::string why;
    if (!transport::available(prov, &why)) {
      r.notes.push_back(prov + ": not available here: " + why);
      std::fprintf(stderr, "[anyep bench transport] %s: not available here: %s\n", prov.c_str(), why.c_str());
      continue;
    }
    benchkit::RunOptions ro;
    ro.timeout_s = 3600;
    ro.kill_all_on_failure = true;
    auto res = benchkit::run_ranks(
        2, [&](benchkit::Rank& rank) { rank.result = run_rank(o, prov, rank); }, ro);
    if (!res.ok()) {
      std::fprintf(stderr, "anyep bench transport: %s FAILED\n%s", prov.c_str(), res.summary().c_str());
      r.ok = false;
      r.notes.push_back(prov + ": FAILED");
      continue;
    }
    ++ran;
    Series sb{prov, {}, {}}, sl{prov, {}, {}};
    Json points = Json::array();
    for (const Point& p : parse_points(res.ranks[0].result)) {
      const double gbps = static_cast<double>(p.msgs * p.size) / p.seconds / 1e9;
      const double mmsg = static_cast<double>(p.msgs) / p.seconds / 1e6;
      r.table.rows.push_back({prov, p.size, p.msgs, gbps, mmsg, p.p50_ns / 1e3, p.p99_ns / 1e3});
      sb.x.emplace_back(p.size), sb.y.push_back(gbps);
      sl.x.emplace_back(p.size), sl.y.push_back(p.p50_ns / 1e3);
      Json jp = Json::object();
      jp.set("size_bytes", p.size);
      jp.set("messages", p.msgs);
      jp.set("seconds", p.seconds);
      jp.set("GBps", gbps);
      jp.set("Mmsg_per_s", mmsg);
      jp.set("latency_p50_us", p.p50_ns / 1e3);
      jp.set("latency_p99_us", p.p99_ns / 1e3);
      points.push(jp);
    }
    r.results.set(prov, points);
    bw.series.push_back(sb);
    lat.series.push_back(sl);
  }
  Json provs = Json::array();
  for (const std::string& p : o.providers) provs.push(p);
  r.config.set("providers", provs);
  r.config.set("min_bytes", o.min_size);
  r.config.set("max_bytes", o.max_size);
  r.config.set("window", o.window);
  r.config.set("bytes_per_point", o.bytes_per_point);
  r.config.set("pingpongs", o.pingpongs);
  if (ran > 0) r.plots = {bw, lat};
  const bool emitted = emit(r, out, join_args(argc, argv));
  if (ran == 0 && r.ok) {
    std::fprintf(stderr, "anyep bench transport: none of the providers is available here\n");
    return kExitCannotRun;
  }
  return r.ok && emitted ? kExitOk : kExitFailed;
}

}  // namespace anyep::cli
