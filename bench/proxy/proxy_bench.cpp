// proxy_bench — proxy throughput (commands/s) for T proxy threads, over loopback (no network
// cost) and libfabric shm, with the ordering engine and bypassing it.
//
// Two ranks in this process. Rank 0 has T rings (one per proxy thread), each fed by one CPU
// producer thread playing a GPU warp: 7 WRITEs of --payload bytes (tag = producer) then one
// count SIGNAL vouching for them (LL-shaped). Rank 1 only receives. A run ends when rank 1 has
// applied every signal, so the figure is end to end: push -> proxy -> transport -> engine ->
// counter. Baseline in the same run: the channel alone (T producers, T consumers that only pop).
//
//   proxy_bench [--threads 1,2,4,8] [--backends loopback,shm] [--orderings bypass,engine] [--commands N]
//               [--payload B] [--reps R] [--no-engine-alone]
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/machine_info.h"
#include "bench/kit/local_cluster.h"
#include "common/error.h"
#include "proxy/ordering_engine.h"
#include "transport/factory.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::benchkit;

namespace {

struct Opts {
  std::vector<uint32_t> threads{1, 2, 4, 8};
  std::vector<std::string> backends{"loopback", "shm"};
  uint64_t commands = 1'000'000;  // per producer; rounded down to a multiple of 8
  uint32_t payload = 64;
  int reps = 3;
  std::vector<std::string> orderings{"bypass", "engine"};
  bool engine_alone = true;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Channel only: T producers push NOPs, T consumers pop in batches. Commands/s.
double channel_baseline(uint32_t T, uint64_t n) {
  ChannelConfig cc;
  cc.num_rings = T;
  cc.capacity = 1024;
  Channel ch(cc);
  std::vector<std::thread> th;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < T; ++r) {
    th.emplace_back([&, r] {
      RingHandle h = ch.producer(r);
      for (uint64_t i = 0; i < n; ++i)
        if (h.push(make_nop(i)) == kPushFailed) std::abort();
    });
    th.emplace_back([&, r] {
      RingConsumer& c = ch.consumer(r);
      TransferCmd b[32];
      for (uint64_t got = 0; got < n;) {
        const uint32_t k = c.poll_batch(b, 32);
        c.pop(k);
        got += k;
      }
    });
  }
  for (auto& t : th) t.join();
  return T * n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The ordering engine alone, one thread, no transport: LL-shaped events (7 writes then a count
// signal per (source, tag), 8 sources x 64 tags interleaved, the signal arriving first half the
// time so it is held). Events/s.
double engine_alone(uint64_t events) {
  std::vector<uint64_t> counters(64);
  OrderingEngine e(EngineConfig{0, 8, 64, 4096, 60'000'000'000ull, false, counters.data(), 64});
  const uint64_t groups = 8 * 64, rounds = events / 8 / groups;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t r = 0; r < rounds; ++r)
    for (uint32_t g = 0; g < groups; ++g) {
      const uint32_t src = g % 8, tag = g / 8;
      SignalRecord rec{};
      rec.counter = tag;
      rec.value = 1;
      rec.tag = static_cast<uint16_t>(tag);
      rec.fence = static_cast<uint8_t>(Fence::kCount);
      rec.fence_count = 7;
      const bool early = (r + g) & 1;
      if (early && e.on_signal(src, rec, 0)) std::abort();
      for (int i = 0; i < 7; ++i)
        if (e.on_write(src, imm::encode_write(tag, 0, false), 0)) std::abort();
      if (!early && e.on_signal(src, rec, 0)) std::abort();
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t applied = 0;
  for (uint64_t c : counters) applied += c;
  if (applied != rounds * groups || e.held()) throw InternalError("engine_alone: signals lost");
  return rounds * groups * 8 / s;
}

struct Result {
  double cmds_per_s = 0, gbps = 0;
  bool bypass = false;
  std::string transport;
};

Result run_proxy(const std::string& backend, uint32_t T, Ordering ordering, uint64_t n, uint32_t payload) {
  LocalClusterConfig lc;
  lc.ranks = 2;
  lc.threads = T;
  lc.rings = T;
  lc.ring_capacity = 1024;
  const uint64_t area = 16 * ((payload + 15) / 16) * 8;
  lc.buffer_bytes = area * T + 4096;
  lc.num_counters = T;
  lc.proxy.num_tags = T;
  lc.proxy.ordering = ordering;
  lc.proxy.timeout_ns = 60'000'000'000ull;
  if (backend != "loopback")
    lc.endpoints = [backend](uint32_t rank, uint32_t) {
      return transport::make_transport(transport::TransportSpec::from_env(backend, rank, 2));
    };
  LocalCluster cl(lc);
  Result res;
  res.bypass = cl.rank(0).proxy->bypass();
  cl.start();
  const uint64_t rounds = n / 8;
  std::vector<std::thread> th;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t p = 0; p < T; ++p)
    th.emplace_back([&, p] {
      RingHandle h = cl.rank(0).channel->producer(p);
      const uint64_t so = area * p, slot = 16 * ((payload + 15) / 16);
      for (uint64_t r = 0; r < rounds; ++r) {
        for (uint32_t i = 0; i < 7; ++i)
          if (h.push(make_write(1, so + i * slot, so + i * slot, payload, p)) == kPushFailed) std::abort();
        if (h.push(make_signal(1, p, 1, cmd::kFenceCount, p, 7)) == kPushFailed) std::abort();
      }
    });
  for (auto& t : th) t.join();
  const auto limit = t0 + std::chrono::seconds(60);
  for (uint32_t p = 0; p < T; ++p)
    while (port::load_acquire_system(&cl.rank(1).counters[p]) < rounds) {
      cl.check();
      if (std::chrono::steady_clock::now() > limit) throw TimeoutError("proxy_bench: signals never all applied");
      sched_yield();
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cl.stop();
  cl.check();
  const ProxyStats st = cl.rank(0).proxy->stats();
  if (st.commands != rounds * 8 * T) throw InternalError("proxy_bench: retired count mismatch");
  res.cmds_per_s = rounds * 8 * T / s;
  res.gbps = rounds * 7 * T * double(payload) / s / 1e9;
  res.transport = backend;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads.clear();
      for (auto& s : split(val())) o.threads.push_back(std::stoul(s));
    } else if (a == "--backends")
      o.backends = split(val());
    else if (a == "--commands")
      o.commands = std::stoull(val());
    else if (a == "--payload")
      o.payload = std::stoul(val());
    else if (a == "--reps")
      o.reps = std::stoi(val());
    else if (a == "--orderings")
      o.orderings = split(val());
    else if (a == "--no-engine-alone")
      o.engine_alone = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads 1,2,4,8] [--backends loopback,shm] [--orderings bypass,engine] "
                   "[--commands N] [--payload B] [--reps R] [--no-engine-alone]\n",
                   argv[0]);
      return 2;
    }
  }
  ::setenv("FI_TCP_IFACE", "lo", 0);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::printf("proxy_bench: machine %s, %u CPUs (%s)\n", host, std::thread::hardware_concurrency(),
              bench::cpu_model().c_str());
  std::printf("command: ");
  for (int i = 0; i < argc; ++i) std::printf("%s ", argv[i]);
  std::printf(
      "\nworkload: per producer %llu commands = rounds of 7 WRITE x %u B + 1 count SIGNAL; 2 ranks in one "
      "process, rank 0 sends; median of %d runs; end to end (last signal applied at rank 1)\n",
      (unsigned long long)(o.commands / 8 * 8), o.payload, o.reps);
  if (o.engine_alone) {
    std::vector<double> v;
    for (int r = 0; r < o.reps; ++r) v.push_back(engine_alone(8'000'000));
    std::printf(
        "ordering engine alone (one thread, no transport, LL-shaped events, half the signals held): "
        "%.1f M events/s\n",
        median(v) / 1e6);
  }
  std::printf("%-9s %-7s %2s %14s %9s %20s\n", "backend", "order", "T", "Mcommands/s", "GB/s", "baseline chan Mcmd/s");
  for (const std::string& be : o.backends)
    for (const std::string& ord : o.orderings)
      for (uint32_t T : o.threads) {
        if (ord != "bypass" && ord != "engine") {
          std::fprintf(stderr, "--orderings: '%s' is neither bypass nor engine\n", ord.c_str());
          return 2;
        }
        const Ordering ordering = ord == "engine" ? Ordering::kEngine : Ordering::kBypass;
        std::vector<double> c, g, b;
        Result last;
        try {
          for (int r = 0; r < o.reps; ++r) {
            last = run_proxy(be, T, ordering, o.commands, o.payload);
            c.push_back(last.cmds_per_s);
            g.push_back(last.gbps);
            b.push_back(channel_baseline(T, o.commands));
          }
        } catch (const std::exception& e) {
          std::printf("%-9s %-7s %2u   skipped: %s\n", be.c_str(), ord.c_str(), T, e.what());
          continue;
        }
        std::printf("%-9s %-7s %2u %14.2f %9.2f %20.2f\n", be.c_str(), ord.c_str(), T, median(c) / 1e6, median(g),
                    median(b) / 1e6);
        std::fflush(stdout);
      }
  return 0;
}
