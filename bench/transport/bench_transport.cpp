// bench_transport — message rate and bandwidth of the anyep libfabric transport against a raw
// libfabric loop posting the same writes on the very same endpoint, in the same run.
//
// Two processes on this host (rank 0 writes, rank 1 receives), provider tcp (pinned to lo) and/or
// shm. For each size: K writes with a 32-bit immediate, at most `window` in flight; the sender
// times first post -> last local completion, the receiver counts every immediate. Modes
// run in pairs (raw then anyep, anyep then raw, ...) `reps` times; medians of rates are reported,
// and the median over pairs of the ratio anyep/raw of message rates (1.00 = no cost; 0.95 = 5%
// slower). Bandwidth is rate x size. Last, a one-process loop (64 B writes to itself) isolates the
// abstraction's CPU cost per message from cross-process contention.
//
// usage: bench_transport [--providers tcp,shm] [--reps 9] [--window 64] [--min 64] [--max 16M]
//                        [--bytes-per-point 256M] [--api batch|single] [--pin]
// --pin puts rank r on the r-th CPU this process may use (steadier figures on a small, busy host).
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/kit/mp_harness.h"
#include "transport/factory.h"
#include "transport/libfabric/libfabric_transport.h"

using namespace anyep;
using namespace anyep::transport;
using Clock = std::chrono::steady_clock;

namespace {

// A libfabric endpoint for host memory, never under chaos: the raw baseline posts on the very
// same libfabric objects (raw_write_handles), which a chaos wrapper would hide.
TransportSpec host_spec(const std::string& provider, uint32_t rank, uint32_t num_ranks) {
  TransportSpec spec = TransportSpec::from_env(provider, rank, num_ranks);
  spec.chaos.reset();
  spec.libfabric.want_hmem = false;  // host memory benchmark
  return spec;
}

struct Opts {
  std::vector<std::string> providers{"tcp", "shm"};
  int reps = 9;
  uint32_t window = 64;
  uint64_t min_size = 64, max_size = 16ull << 20;
  uint64_t bytes_per_point = 256ull << 20;
  uint64_t max_msgs = 20000, min_msgs = 64;
  bool pin = false;
};

// Pins the calling process to the r-th CPU of its allowed set (no-op with fewer CPUs).
void pin_to_nth_cpu(uint32_t r) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed)) return;
  uint32_t seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed) && seen++ == r) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      if (sched_setaffinity(0, sizeof one, &one)) std::perror("sched_setaffinity");
      return;
    }
}

uint64_t parse_size(const char* s) {
  char* end = nullptr;
  uint64_t v = std::strtoull(s, &end, 0);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

[[noreturn]] void die(const std::string& m) { throw std::runtime_error(m); }

// ---- the anyep path ----
// Posts through post_writes (batches of what the window allows, as the proxy posts), or with
// --api single one post_write per write.
bool g_single = false;

// Sets the immediate and context of w[0..m) for writes first..first+m-1.
void number(WriteDesc* w, size_t m, uint64_t first) {
  for (size_t i = 0; i < m; ++i) {
    w[i].imm = static_cast<uint32_t>(first + i);
    w[i].context = first + i;
  }
}

// Posts w[0..m) with the chosen API; returns how many went out (dies on anything but -EAGAIN).
size_t post_some(Transport& t, WriteDesc* w, size_t m) {
  size_t sent = 0;
  int rc = 0;
  if (g_single) {
    while (sent < m && (rc = t.post_write(w[sent])) == 0) ++sent;
  } else {
    rc = t.post_writes(w, m, &sent);
  }
  if (rc && rc != -EAGAIN) die("post_write(s): " + t.last_error());
  return sent;
}

double run_anyep(Transport& t, bool sender, MrId src, MrId dst, uint64_t size, uint64_t k, uint32_t window) {
  Completion c[64];
  ImmEvent im[64];
  size_t nc = 0, ni = 0;
  std::vector<WriteDesc> batch(window, WriteDesc{1, src, 0, dst, 0, size, true, 0, 0});
  auto t0 = Clock::now();
  if (sender) {
    uint64_t posted = 0, done = 0;
    while (done < k) {
      size_t m = std::min<uint64_t>(window - (posted - done), k - posted);
      number(batch.data(), m, posted);
      posted += post_some(t, batch.data(), m);
      if (t.poll(c, 64, &nc, im, 0, &ni)) die("poll: " + t.last_error());
      for (size_t i = 0; i < nc; ++i)
        if (c[i].status) die("completion failed: " + t.last_error());
      done += nc;
    }
  } else {
    uint64_t got = 0;
    while (got < k) {
      if (t.poll(c, 0, &nc, im, 64, &ni)) die("poll: " + t.last_error());
      got += ni;
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- the raw libfabric baseline: the same writes, posted directly on the same endpoint ----
double run_raw(const libfabric::RawWrite& h, bool sender, uint64_t size, uint64_t k, uint32_t window) {
  std::vector<fi_context2> ctx(window);
  std::vector<fi_context2*> free_ctx;
  for (auto& x : ctx) free_ctx.push_back(&x);
  fi_cq_data_entry e[64];
  fi_addr_t from[64];
  auto t0 = Clock::now();
  if (sender) {
    uint64_t posted = 0, done = 0;
    while (done < k) {
      while (posted < k && !free_ctx.empty()) {
        ssize_t rc = fi_writedata(h.ep, h.local_base, size, h.local_desc, h.cq_data_high | posted, h.dest_addr,
                                  h.remote_addr, h.remote_key, free_ctx.back());
        if (rc == -FI_EAGAIN) break;
        if (rc) die("fi_writedata: " + std::string(fi_strerror(static_cast<int>(-rc))));
        free_ctx.pop_back();
        ++posted;
      }
      ssize_t n = fi_cq_read(h.txcq, e, 64);
      if (n == -FI_EAGAIN) continue;
      if (n < 0) die("fi_cq_read: " + std::string(fi_strerror(static_cast<int>(-n))));
      for (ssize_t i = 0; i < n; ++i) free_ctx.push_back(static_cast<fi_context2*>(e[i].op_context));
      done += static_cast<uint64_t>(n);
    }
  } else {
    uint64_t got = 0;
    while (got < k) {
      // Same CQ call as the transport: with FI_SOURCE it asks for the writers' addresses too.
      ssize_t n = h.fi_source ? fi_cq_readfrom(h.rxcq, e, 64, from) : fi_cq_read(h.rxcq, e, 64);
      if (n == -FI_EAGAIN) continue;
      if (n < 0) die("fi_cq_read (rx): " + std::string(fi_strerror(static_cast<int>(-n))));
      for (ssize_t i = 0; i < n; ++i) got += (e[i].flags & FI_REMOTE_CQ_DATA) ? 1 : 0;
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Single process writing 64-byte writes to itself: post, local completion and immediate all in
// one loop, so the CPU cost of the abstraction shows without two processes contending for the
// provider's shared-memory locks (which, on a small host, dominates the two-process figures).
void self_loop(const std::string& prov, int reps) {
  auto t = make_transport(host_spec(prov, 0, 1));
  std::vector<uint8_t> a(4096, 1), b(4096, 0);
  MrId s = t->register_memory(a.data(), a.size(), MemKind::kHost),
       d = t->register_memory(b.data(), b.size(), MemKind::kHost);
  auto bs =
      make_callback_bootstrap(0, 1, [](const std::vector<uint8_t>& m) { return std::vector<std::vector<uint8_t>>{m}; });
  connect_all(*t, *bs, {s, d});
  auto h = libfabric::raw_write_handles(*t, 0, s, 0, d);
  const uint64_t K = 100000, W = 64, size = 64;
  fi_cq_data_entry e[64];
  fi_addr_t from[64];
  std::vector<double> raw_ns, any_ns, ratios;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<fi_context2> ctx(W);
    std::vector<fi_context2*> fr;
    for (auto& x : ctx) fr.push_back(&x);
    auto t0 = Clock::now();
    uint64_t posted = 0, done = 0, got = 0;
    while (done < K || got < K) {
      while (posted < K && !fr.empty()) {
        if (fi_writedata(h.ep, h.local_base, size, h.local_desc, h.cq_data_high | posted, h.dest_addr, h.remote_addr,
                         h.remote_key, fr.back()))
          break;
        fr.pop_back();
        ++posted;
      }
      ssize_t n = fi_cq_read(h.txcq, e, 64);
      for (ssize_t i = 0; i < n; ++i) fr.push_back(static_cast<fi_context2*>(e[i].op_context));
      done += n > 0 ? static_cast<uint64_t>(n) : 0;
      n = h.fi_source ? fi_cq_readfrom(h.rxcq, e, 64, from) : fi_cq_read(h.rxcq, e, 64);
      got += n > 0 ? static_cast<uint64_t>(n) : 0;
    }
    double traw = std::chrono::duration<double>(Clock::now() - t0).count();
    Completion c[64];
    ImmEvent im[64];
    size_t nc = 0, ni = 0;
    std::vector<WriteDesc> w(W, WriteDesc{0, s, 0, d, 0, size, true, 0, 0});
    t0 = Clock::now();
    posted = done = got = 0;
    while (done < K || got < K) {
      size_t m = std::min<uint64_t>(W - (posted - done), K - posted);
      number(w.data(), m, posted);
      posted += post_some(*t, w.data(), m);
      if (t->poll(c, 64, &nc, im, 64, &ni)) die("poll: " + t->last_error());
      done += nc;
      got += ni;
    }
    double tany = std::chrono::duration<double>(Clock::now() - t0).count();
    raw_ns.push_back(traw / K * 1e9);
    any_ns.push_back(tany / K * 1e9);
    ratios.push_back(traw / tany);
  }
  std::sort(raw_ns.begin(), raw_ns.end());
  std::sort(any_ns.begin(), any_ns.end());
  std::sort(ratios.begin(), ratios.end());
  std::printf("self   %-6s %9d %7llu %11.1f %11.1f %9.3f   (one process writing to itself, medians of %d)\n",
              prov.c_str(), 64, static_cast<unsigned long long>(K), raw_ns[reps / 2], any_ns[reps / 2],
              ratios[reps / 2], reps);
}

std::string machine() {
  utsname u{};
  uname(&u);
  std::string cpu = "?";
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return std::string(u.nodename) + ", " + u.sysname + " " + u.release + ", " + cpu + ", " +
         std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " online cores";
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  std::string cmd;
  for (int i = 0; i < argc; ++i) {
    if (i) cmd += " ";
    cmd += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--providers") {
      o.providers.clear();
      std::string v = next();
      for (size_t p = 0; p <= v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        if (q > p) o.providers.push_back(v.substr(p, q - p));
        p = q + 1;
      }
    } else if (a == "--reps")
      o.reps = std::atoi(next());
    else if (a == "--window")
      o.window = static_cast<uint32_t>(std::atoi(next()));
    else if (a == "--min")
      o.min_size = parse_size(next());
    else if (a == "--max")
      o.max_size = parse_size(next());
    else if (a == "--bytes-per-point")
      o.bytes_per_point = parse_size(next());
    else if (a == "--max-msgs")
      o.max_msgs = parse_size(next());
    else if (a == "--pin")
      o.pin = true;
    else if (a == "--api") {
      std::string v = next();
      if (v != "batch" && v != "single") {
        std::fprintf(stderr, "--api takes batch or single\n");
        return 2;
      }
      g_single = v == "single";
    } else {
      std::fprintf(stderr, "unknown option %s (see the header of bench_transport.cpp)\n", a.c_str());
      return 2;
    }
  }
  ::setenv("FI_TCP_IFACE", "lo", 0);  // loopback only
  std::printf("# bench_transport: anyep libfabric transport vs raw libfabric on the same endpoint\n");
  std::printf("# command: %s\n# machine: %s\n", cmd.c_str(), machine().c_str());
  std::printf(
      "# 2 processes on this host; window %u writes in flight; %d raw/anyep pairs in alternating order; "
      "ratio = median of per-pair anyep/raw rate ratios; anyep posts with %s%s\n",
      o.window, o.reps, g_single ? "post_write (one call per write)" : "post_writes (batches)",
      o.pin ? "; rank r pinned to the r-th allowed CPU" : "");
  bool all_ok = true;
  for (const std::string& prov : o.providers) {
    std::string why;
    if (!available(prov, &why)) {
      std::printf("# provider %s: SKIPPED: %s\n", prov.c_str(), why.c_str());
      continue;
    }
    std::vector<uint64_t> sizes;
    for (uint64_t s = o.min_size; s <= o.max_size; s *= 4) sizes.push_back(s);
    // Each rank writes its results for rank 0 to print: (size -> rates) through a pipe is overkill;
    // rank 0 prints directly (children share stdout) and rank 1 stays quiet.
    benchkit::RunOptions ro;
    ro.timeout_s = 600;
    auto res = benchkit::run_ranks(
        2,
        [&](benchkit::Rank& r) {
          if (o.pin) pin_to_nth_cpu(r.rank);
          auto t = make_transport(host_spec(prov, r.rank, r.size));
          std::vector<uint8_t> a(o.max_size, 1), b(o.max_size, 0);
          MrId src = t->register_memory(a.data(), a.size(), MemKind::kHost);
          MrId dst = t->register_memory(b.data(), b.size(), MemKind::kHost);
          connect_all(*t, *r.boot, {src, dst});
          auto raw = libfabric::raw_write_handles(*t, 0, src, 1 - r.rank, dst);
          bool sender = r.rank == 0;
          if (sender) {
            std::printf("# provider %s: %s\n", prov.c_str(), libfabric::describe(*t).c_str());
            std::printf("%-6s %9s %7s %12s %12s %9s %11s %11s %s\n", "prov", "size_B", "msgs", "raw_Mmsg/s",
                        "anyep_Mmsg/s", "ratio", "raw_GB/s", "anyep_GB/s", "target");
          }
          for (uint64_t size : sizes) {
            uint64_t k = std::clamp<uint64_t>(o.bytes_per_point / size, o.min_msgs, o.max_msgs);
            // Warm-up (connections, page faults, caches), not timed.
            r.boot->barrier();
            run_raw(raw, sender, size, std::min<uint64_t>(k, 256), o.window);
            r.boot->barrier();
            run_anyep(*t, sender, src, dst, size, std::min<uint64_t>(k, 256), o.window);
            // Pairs run back to back, in alternating order, so that drift from other load on the host
            // hits both sides of a pair alike; the reported ratio is the median of per-pair ratios.
            std::vector<double> tr, ta, ratios;
            for (int rep = 0; rep < o.reps; ++rep) {
              double x = 0, y = 0;
              for (int half = 0; half < 2; ++half) {
                r.boot->barrier();
                if ((half == 0) == (rep % 2 == 0))
                  x = run_raw(raw, sender, size, k, o.window);
                else
                  y = run_anyep(*t, sender, src, dst, size, k, o.window);
              }
              tr.push_back(x);
              ta.push_back(y);
              ratios.push_back(x / y);  // (k/y) / (k/x): anyep rate over raw rate
            }
            r.boot->barrier();
            if (!sender) continue;
            std::sort(tr.begin(), tr.end());
            std::sort(ta.begin(), ta.end());
            std::sort(ratios.begin(), ratios.end());
            double raw_rate = k / tr[tr.size() / 2], any_rate = k / ta[ta.size() / 2];
            double ratio = ratios[ratios.size() / 2];
            const char* target = size >= (64u << 10) ? ">=0.95" : size <= 64 ? ">=0.85" : "-";
            bool ok = size >= (64u << 10) ? ratio >= 0.95 : size <= 64 ? ratio >= 0.85 : true;
            std::printf("%-6s %9llu %7llu %12.4f %12.4f %9.3f %11.3f %11.3f %s%s\n", prov.c_str(),
                        static_cast<unsigned long long>(size), static_cast<unsigned long long>(k), raw_rate / 1e6,
                        any_rate / 1e6, ratio, raw_rate * size / 1e9, any_rate * size / 1e9, target,
                        *target == '-' ? ""
                        : ok           ? " ok"
                                       : " MISSED");
            std::fflush(stdout);
            if (!ok) std::fprintf(stderr, "MISSED %s %llu\n", prov.c_str(), static_cast<unsigned long long>(size));
          }
        },
        ro);
    if (!res.ok()) {
      std::printf("# provider %s: FAILED\n%s", prov.c_str(), res.summary().c_str());
      all_ok = false;
    }
  }
  std::printf("%-6s %-6s %9s %7s %11s %11s %9s\n", "self", "prov", "size_B", "msgs", "raw_ns/msg", "anyep_ns/msg",
              "ratio");
  for (const std::string& prov : o.providers) {
    std::string why;
    if (available(prov, &why)) self_loop(prov, o.reps);
  }
  return all_ok ? 0 : 1;
}
