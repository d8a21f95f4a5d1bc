// anyep_main — the README's main job. Without a GPU (the only mode so far): CPU producer threads
// push commands through channel rings to consumer threads and the run prints commands/s and
// push-to-pop latency. (The proxy/transport pipeline across processes replaces this once the
// proxy lands; the GPU dispatch/combine benchmark once the kernels do.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "channel/channel.h"

using namespace anyep;

int main(int argc, char** argv) {
  const uint32_t rings = argc > 1 ? std::atoi(argv[1]) : 2;
  const uint64_t per_ring = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 2'000'000;
  Channel ch({.num_rings = rings, .capacity = 1024});
  std::vector<std::vector<uint64_t>> lat(rings);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < rings; ++r) {
    th.emplace_back([&, r] {  // producer: payload = push time (ns)
      RingHandle h = ch.producer(r);
      for (uint64_t i = 0; i < per_ring; ++i)
        if (h.push(make_nop(port::now_ns())) == kPushFailed) std::abort();
    });
    th.emplace_back([&, r] {  // consumer
      RingConsumer& c = ch.consumer(r);
      TransferCmd batch[64];
      uint64_t got = 0;
      while (got < per_ring) {
        uint32_t n = c.poll_batch(batch, 64);
        uint64_t now = port::now_ns();
        for (uint32_t k = 0; k < n; ++k)
          if (((got + k) & 1023) == 0) lat[r].push_back(now - batch[k].hi);
        c.pop(n);
        got += n;
      }
    });
  }
  for (auto& t : th) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<uint64_t> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, size_t(p * all.size()))] / 1e3; };
  std::printf("anyep_main: CPU channel pipeline, %u rings x %llu commands, %u producer + %u consumer threads\n",
              rings, (unsigned long long)per_ring, rings, rings);
  std::printf("  %.2f M commands/s   push-to-pop latency p50 %.2f us  p99 %.2f us\n",
              rings * per_ring / s / 1e6, pct(0.5), pct(0.99));
  return 0;
}
