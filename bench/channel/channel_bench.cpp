// anyep_channel_bench — GPU->CPU command channel: commands/s and push-to-pop latency against
// offered load, for T host consumer threads. Prints the machine, the command, how GPU and host
// clocks were related, and baselines measured in the same run (raw 16-byte stores into mapped
// memory; the same pipeline with CPU producer threads). See docs/bench/channel.md.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "../common/machine_info.h"
#include "bench_kernels.h"
#include "channel/channel.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::bench;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::vector<double> parse_list(const char* s) {
  std::vector<double> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    v.push_back(std::strtod(p, &end));
    if (end == p) throw std::runtime_error(std::string("bad number list: ") + s);
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

// ---- latency histogram: 10 ns bins up to 1 ms ------------------------------------------------
constexpr uint64_t kBinNs = 10, kBins = 100000;

struct ConsumerStats {
  uint64_t count = 0, negative = 0, overflow = 0;
  uint64_t first_ns = ~0ull, last_ns = 0;
  std::vector<uint32_t> hist = std::vector<uint32_t>(kBins, 0);
};

// Thread t of T drains rings t, t+T, ... until `producers_done` was set before a pass that found
// nothing. Latency = host time at pop - (push timestamp converted to host time).
void consume(Channel& ch, uint32_t t, uint32_t T, int64_t gpu_minus_host, const std::atomic<bool>& producers_done,
             ConsumerStats& st) {
  TransferCmd batch[128];
  for (;;) {
    const bool done = producers_done.load(std::memory_order_acquire);
    uint64_t got = 0;
    for (uint32_t r = t; r < ch.num_rings(); r += T) {
      RingConsumer& c = ch.consumer(r);
      const uint32_t n = c.poll_batch(batch, 128);
      if (!n) continue;
      const uint64_t now = port::now_ns();
      for (uint32_t k = 0; k < n; ++k) {
        const int64_t lat = static_cast<int64_t>(now) - (static_cast<int64_t>(batch[k].hi) - gpu_minus_host);
        if (lat < 0) {
          ++st.negative;
          ++st.hist[0];
        } else if (static_cast<uint64_t>(lat) / kBinNs >= kBins) {
          ++st.overflow;
        } else {
          ++st.hist[static_cast<uint64_t>(lat) / kBinNs];
        }
      }
      c.pop(n);
      got += n;
      st.first_ns = std::min(st.first_ns, now);
      st.last_ns = now;
    }
    st.count += got;
    if (!got && done) return;
  }
}

struct Point {
  std::string pipeline;  // "gpu-warp", "gpu-lane", "cpu"
  uint32_t T = 0;
  double offered_mps = 0;  // 0: unthrottled
  double achieved_mps = 0;
  double p50_us = 0, p99_us = 0;
  uint64_t commands = 0, negative = 0, overflow = 0, failures = 0;
};

Point summarize(std::vector<ConsumerStats>& st, Point pt) {
  std::vector<uint64_t> hist(kBins, 0);
  uint64_t first = ~0ull, last = 0;
  for (auto& s : st) {
    for (uint64_t b = 0; b < kBins; ++b) hist[b] += s.hist[b];
    pt.commands += s.count;
    pt.negative += s.negative;
    pt.overflow += s.overflow;
    if (s.count) first = std::min(first, s.first_ns), last = std::max(last, s.last_ns);
  }
  auto pct = [&](double q) {
    const uint64_t want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(pt.commands)));
    uint64_t cum = 0;
    for (uint64_t b = 0; b < kBins; ++b)
      if ((cum += hist[b]) >= want) return (b + 0.5) * kBinNs / 1e3;
    return static_cast<double>(INFINITY);  // in the overflow (> 1 ms)
  };
  pt.p50_us = pct(0.50);
  pt.p99_us = pct(0.99);
  pt.achieved_mps = last > first ? pt.commands / ((last - first) / 1e3) : 0;
  return pt;
}

// ---- GPU clock vs host clock ------------------------------------------------------------------
struct Calibration {
  int64_t gpu_minus_host = 0;  // globaltimer - CLOCK_MONOTONIC, ns
  uint64_t min_rtt = 0;        // shortest ping-pong round trip, ns
  uint32_t used = 0;           // samples averaged (round trip within min + 100 ns)
  int64_t spread = 0;          // max - min offset among the used samples
};

Calibration calibrate(uint32_t n = 2000) {
  uint32_t *ping, *pong, *dping, *dpong;
  uint64_t *gtime, *dgtime;
  check(cudaHostAlloc(&ping, 64, cudaHostAllocMapped), "cudaHostAlloc(ping)");
  check(cudaHostAlloc(&pong, 64, cudaHostAllocMapped), "cudaHostAlloc(pong)");
  check(cudaHostAlloc(&gtime, (n + 1) * sizeof(uint64_t), cudaHostAllocMapped), "cudaHostAlloc(gtime)");
  *ping = 0, *pong = 0;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dping), ping, 0), "ptr");
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dpong), pong, 0), "ptr");
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dgtime), gtime, 0), "ptr");
  check(launch_pingpong(dping, dpong, dgtime, n, nullptr), "pingpong launch");
  std::vector<std::pair<uint64_t, int64_t>> samples;  // (rtt, offset)
  for (uint32_t i = 1; i <= n; ++i) {
    const uint64_t t0 = port::now_ns();
    port::store_release_system(ping, i);
    uint32_t v;
    while ((v = port::load_acquire_system(pong)) != i) {
      if (v == ~0u || port::now_ns() - t0 > 2'000'000'000ull)
        throw std::runtime_error("clock calibration: GPU did not answer");
    }
    const uint64_t t1 = port::now_ns();
    samples.emplace_back(t1 - t0, static_cast<int64_t>(gtime[i]) - static_cast<int64_t>((t0 + t1) / 2));
  }
  check(cudaDeviceSynchronize(), "pingpong");
  std::sort(samples.begin(), samples.end());
  Calibration c;
  c.min_rtt = samples[0].first;
  // Offsets are ~1.8e18 (globaltimer counts from 1970, CLOCK_MONOTONIC from boot): sum the
  // differences to the first one, not the offsets themselves, or the sum overflows.
  const int64_t base = samples[0].second;
  int64_t sum = 0, lo = INT64_MAX, hi = INT64_MIN;
  for (auto& [rtt, off] : samples) {
    if (rtt > c.min_rtt + 100) break;
    sum += off - base, ++c.used, lo = std::min(lo, off), hi = std::max(hi, off);
  }
  c.gpu_minus_host = base + sum / static_cast<int64_t>(c.used);
  c.spread = hi - lo;
  cudaFreeHost(ping), cudaFreeHost(pong), cudaFreeHost(gtime);
  return c;
}

struct Options {
  uint32_t warps = 128, rings = 8, capacity = 4096;
  double ms = 200;
  std::vector<double> threads{1, 2, 4, 8};
  std::vector<double> rates{2, 4, 8, 16, 32, 0};  // M commands/s; 0 = unthrottled
  std::string csv;
};

Point run_gpu(const Options& o, uint32_t T, double rate_mps, int warp_push, Calibration& cal) {
  cal = calibrate();
  Channel ch(
      {.num_rings = o.rings, .capacity = o.capacity, .producer = ProducerKind::kGpu, .timeout_ns = 10'000'000'000});
  unsigned long long* counters;
  check(cudaMalloc(&counters, 2 * sizeof(unsigned long long)), "cudaMalloc");
  check(cudaMemset(counters, 0, 2 * sizeof(unsigned long long)), "cudaMemset");
  LoadParams p{ch.producer_array(),
               o.rings,
               o.warps,
               static_cast<uint64_t>(o.ms * 1e6),
               rate_mps > 0 ? static_cast<uint64_t>(32.0 * o.warps / rate_mps * 1e3) : 0,
               warp_push,
               counters,
               counters + 1};
  std::atomic<bool> done{false};
  std::vector<ConsumerStats> st(T);
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < T; ++t) pool.emplace_back([&, t] { consume(ch, t, T, cal.gpu_minus_host, done, st[t]); });
  check(launch_load(p, nullptr), "load kernel launch");
  check(cudaDeviceSynchronize(), "load kernel");
  done.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  unsigned long long c[2];
  check(cudaMemcpy(c, counters, sizeof c, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(counters);
  ch.check_errors();
  Point pt;
  pt.pipeline = warp_push ? "gpu-warp" : "gpu-lane";
  pt.T = T;
  pt.offered_mps = rate_mps;
  pt.failures = c[1];
  pt = summarize(st, pt);
  if (pt.commands != c[0])
    throw std::runtime_error("pushed " + std::to_string(c[0]) + " commands but consumed " +
                             std::to_string(pt.commands));
  return pt;
}

// Baseline: the same consumers with T CPU producer threads (one ring each... R rings, producer t
// pushes into rings t, t+T, ... in turn), unthrottled, host clock on both ends.
Point run_cpu(const Options& o, uint32_t T) {
  Channel ch(
      {.num_rings = o.rings, .capacity = o.capacity, .producer = ProducerKind::kCpu, .timeout_ns = 10'000'000'000});
  std::atomic<bool> done{false};
  std::vector<ConsumerStats> st(T);
  std::vector<std::thread> consumers, producers;
  for (uint32_t t = 0; t < T; ++t) consumers.emplace_back([&, t] { consume(ch, t, T, 0, done, st[t]); });
  const uint64_t end = port::now_ns() + static_cast<uint64_t>(o.ms * 1e6);
  for (uint32_t t = 0; t < T; ++t)
    producers.emplace_back([&, t] {
      std::vector<RingHandle> mine;
      for (uint32_t r = t; r < o.rings; r += T) mine.push_back(ch.producer(r));
      // A push that times out fills its ring's error record: ch.check_errors() below reports it.
      for (uint64_t k = 0; port::now_ns() < end; ++k)
        for (int i = 0; i < 32; ++i) (void)mine[k % mine.size()].push(make_nop(port::now_ns()));
    });
  for (auto& th : producers) th.join();
  done.store(true, std::memory_order_release);
  for (auto& th : consumers) th.join();
  Point pt;
  pt.pipeline = "cpu";
  pt.T = T;
  return summarize(st, pt);
}

// Clock-free: round trip GPU push -> host pop -> GPU sees done(), one command in flight, T = 1.
// Each sample bounds that command's push-to-pop latency from above.
std::vector<uint64_t> channel_rtt(const Options& o, uint32_t n = 2000) {
  Channel ch({.num_rings = 1, .capacity = o.capacity, .producer = ProducerKind::kGpu, .timeout_ns = 1'000'000'000});
  uint64_t *out, *dout;
  check(cudaHostAlloc(&out, n * sizeof(uint64_t), cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dout), out, 0), "ptr");
  std::atomic<bool> done{false};
  ConsumerStats st;
  std::thread consumer([&] { consume(ch, 0, 1, 0, done, st); });
  check(launch_channel_rtt(ch.producer(0), n, dout, nullptr), "rtt launch");
  check(cudaDeviceSynchronize(), "rtt kernel");
  done.store(true, std::memory_order_release);
  consumer.join();
  ch.check_errors();
  std::vector<uint64_t> v(out, out + n);
  cudaFreeHost(out);
  std::sort(v.begin(), v.end());
  return v;
}

double raw_store_rate(uint32_t warps, int release) {
  constexpr uint32_t kSlots = 1 << 18, kPerLane = 256;  // 4 MiB of mapped memory
  TransferCmd *buf, *dbuf;
  check(cudaHostAlloc(&buf, kSlots * sizeof(TransferCmd), cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dbuf), buf, 0), "ptr");
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  check(launch_raw_stores(dbuf, kSlots, warps, kPerLane, release, nullptr), "warm-up");
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(a);
    check(launch_raw_stores(dbuf, kSlots, warps, kPerLane, release, nullptr), "raw stores");
    cudaEventRecord(b);
    check(cudaEventSynchronize(b), "raw stores");
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, ms);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  cudaFreeHost(buf);
  return static_cast<double>(warps) * 32 * kPerLane / (best * 1e3);  // M stores/s
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (a == "--warps")
      o.warps = std::stoul(val());
    else if (a == "--rings")
      o.rings = std::stoul(val());
    else if (a == "--capacity")
      o.capacity = std::stoul(val());
    else if (a == "--ms")
      o.ms = std::stod(val());
    else if (a == "--threads")
      o.threads = parse_list(val());
    else if (a == "--rates")
      o.rates = parse_list(val());
    else if (a == "--csv")
      o.csv = val();
    else
      throw std::runtime_error("unknown argument " + a + " (--warps --rings --capacity --ms --threads --rates --csv)");
  }
  if (o.warps % 4) throw std::runtime_error("--warps must be a multiple of 4");
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("anyep_channel_bench: no CUDA GPU visible; nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv), cudaRuntimeGetVersion(&rt);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline.append(i ? " " : "").append(argv[i]);
  std::printf("command: %s\n", cmdline.c_str());
  std::printf("machine: %s; GPU 0 %s (%d SMs, PCI %04x:%02x:%02x), driver %d, runtime %d; CPU %s x %u threads\n", host,
              prop.name, prop.multiProcessorCount, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, drv, rt,
              bench::cpu_model().c_str(), std::thread::hardware_concurrency());
  std::printf(
      "setup: %u producer warps (4 per block), %u rings x %u slots, %.0f ms per point, payload = "
      "%%globaltimer at push; warp w -> ring w %% R; consumer thread t -> rings t, t+T, ...\n",
      o.warps, o.rings, o.capacity, o.ms);

  uint64_t* res;
  check(cudaMallocHost(&res, 2 * sizeof(uint64_t)), "cudaMallocHost");
  check(launch_timer_resolution(res, nullptr), "timer kernel");
  check(cudaDeviceSynchronize(), "timer kernel");
  std::printf("clock: %%globaltimer smallest step %llu ns, mean step %llu ns\n", (unsigned long long)res[0],
              (unsigned long long)res[1]);
  Calibration c0 = calibrate();
  std::printf(
      "clock: globaltimer - CLOCK_MONOTONIC calibrated by a ping-pong through mapped host memory before "
      "every point: %u round trips, the offset is the mean over those within 100 ns of the shortest "
      "(min RTT %llu ns, so the offset is known to +-%llu ns; spread of used samples %lld ns)\n",
      2000u, (unsigned long long)c0.min_rtt, (unsigned long long)c0.min_rtt / 2, (long long)c0.spread);

  {
    const std::vector<uint64_t> rtt = channel_rtt(o);
    std::printf(
        "clock-free check: GPU push -> host pop -> GPU sees done(), one command in flight, T=1, %zu "
        "samples on %%globaltimer alone: min %.2f us, p50 %.2f us, p99 %.2f us (each bounds its command's "
        "push-to-pop latency from above)\n",
        rtt.size(), rtt.front() / 1e3, rtt[rtt.size() / 2] / 1e3, rtt[rtt.size() * 99 / 100] / 1e3);
  }
  const double raw_rel = raw_store_rate(o.warps, 1), raw_weak = raw_store_rate(o.warps, 0);
  std::printf(
      "baseline: raw 16-byte stores into mapped host memory by %u warps: %.1f M/s with st.release.sys, "
      "%.1f M/s with plain stores\n",
      o.warps, raw_rel, raw_weak);

  {  // warm-up, not reported
    Options w = o;
    w.ms = 30;
    Calibration tmp;
    run_gpu(w, 4, 0, 1, tmp);
  }
  std::vector<Point> pts;
  std::vector<Calibration> cals;
  auto add = [&](const Point& p, const Calibration& c) {
    pts.push_back(p);
    cals.push_back(c);
    std::printf(
        "  %-8s T=%u offered %6s M/s: achieved %6.2f M/s  p50 %8.2f us  p99 %8.2f us  (%llu cmds, "
        "offset %lld ns, min RTT %llu ns, %llu negative)\n",
        p.pipeline.c_str(), p.T, p.offered_mps > 0 ? std::to_string(static_cast<int>(p.offered_mps)).c_str() : "max",
        p.achieved_mps, p.p50_us, p.p99_us, (unsigned long long)p.commands, (long long)c.gpu_minus_host,
        (unsigned long long)c.min_rtt, (unsigned long long)p.negative);
    std::fflush(stdout);
  };
  for (double T : o.threads)
    for (double r : o.rates) {
      Calibration c;
      Point p = run_gpu(o, static_cast<uint32_t>(T), r, 1, c);
      add(p, c);
    }
  for (double r : {8.0, 0.0}) {  // one claim per lane instead of per warp, T = 4
    Calibration c;
    add(run_gpu(o, 4, r, 0, c), c);
  }
  add(run_cpu(o, 4), Calibration{});

  std::printf(
      "\n(M commands/s; latency us; +-cal: half the calibration's min round trip, the bound on the "
      "clock offset; cpu rows use the host clock on both ends)\n");
  std::printf("%-9s %3s %9s %10s %9s %9s %7s\n", "pipeline", "T", "offered", "achieved", "p50_us", "p99_us", "+-cal");
  for (size_t i = 0; i < pts.size(); ++i) {
    const Point& p = pts[i];
    std::printf("%-9s %3u %9s %10.2f %9.2f %9.2f %7.2f\n", p.pipeline.c_str(), p.T,
                p.offered_mps > 0 ? (std::to_string(static_cast<int>(p.offered_mps)) + "M").c_str() : "max",
                p.achieved_mps, p.p50_us, p.p99_us, cals[i].min_rtt / 2e3);
  }
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "pipeline,T,offered_mps,achieved_mps,p50_us,p99_us,commands,negative,overflow,offset_ns,min_rtt_ns\n";
    for (size_t i = 0; i < pts.size(); ++i) {
      auto& p = pts[i];
      f << p.pipeline << ',' << p.T << ',' << p.offered_mps << ',' << p.achieved_mps << ',' << p.p50_us << ','
        << p.p99_us << ',' << p.commands << ',' << p.negative << ',' << p.overflow << ',' << cals[i].gpu_minus_host
        << ',' << cals[i].min_rtt << '\n';
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "anyep_channel_bench: %s\n", e.what());
  return 1;
}
