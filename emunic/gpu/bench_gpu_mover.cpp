// emunic/gpu/bench_gpu_mover.cpp — figures of the GPU mover, printed with the GPU's name, the command
// line and the SMs the engine used:
//   post rate    one host thread: the cost of post() alone (half a ring), and posts/s sustained
//                with the engine completing them (0 B, 64 B and 7.4 KiB moves, a completion each)
//   bandwidth    4 KiB .. 1 MiB moves on this GPU, and to a peer GPU when one is reachable
//   relaunch     idle engine -> post -> completion seen by the host, against the same with the
//                kernel already running (the difference is what a relaunch costs)
// Options: --device N, --sms LIST (e.g. 8,16,32: every section for each), --threads N,
// --idle-us N, --peer N (-1: the first reachable GPU; -2: none), --quick (fewer moves).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu_runtime.h"
#include "common/portability.h"
#include "gpu_mover.h"

namespace {

using namespace anyep;
using namespace anyep_emunic::gpu;

constexpr uint64_t kSec = 1000ull * 1000ull * 1000ull;

uint64_t now_ns() { return anyep::port::now_ns(); }

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Options {
  int device = 0;
  std::vector<int> sms = {16};
  int threads = 512;
  uint32_t idle_us = 30;
  int peer = -1;
  bool quick = false;
};

struct Bufs {
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint8_t* peer_dst = nullptr;
  uint64_t bytes = 256ull << 20;
  uint32_t* words_h = nullptr;  // host-mapped completion words
  uint32_t* words_d = nullptr;
  static constexpr uint32_t kWords = 1u << 16;
};

// Waits until the engine's completed() mirror reaches `target` (bounded).
bool wait_completed(const GpuMover& m, uint64_t target, uint64_t timeout_ns) {
  const uint64_t t0 = now_ns();
  while (m.completed() < target) {
    if (now_ns() - t0 > timeout_ns) return false;
  }
  return true;
}

// Posts n moves of `size` bytes (offsets cycling through the buffers), one post() each; returns the
// seconds from the first post to the last completion.
double run_moves(GpuMover& m, const Bufs& b, uint8_t* dst, uint64_t size, uint64_t n, double* post_s) {
  const uint64_t span = size == 0 ? 1 : std::max<uint64_t>(1, b.bytes / std::max<uint64_t>(size, 4096));
  const uint64_t stride = std::max<uint64_t>(size, 4096);
  const uint64_t base = m.completed();
  const uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t off = (i % span) * stride;
    const MoveDescriptor d = GpuMover::describe(b.src + off, dst + off, size, b.words_d + (i % Bufs::kWords),
                                                CompletionOp::kStore32, static_cast<uint32_t>(i + 1));
    m.post_wait(d, 10 * kSec);
  }
  const uint64_t t1 = now_ns();
  if (!wait_completed(m, base + n, 30 * kSec)) {
    std::fprintf(stderr, "moves not completed in 30 s: %s\n", m.state_text().c_str());
    std::exit(1);
  }
  const uint64_t t2 = now_ns();
  if (post_s) *post_s = static_cast<double>(t1 - t0) / 1e9;
  return static_cast<double>(t2 - t0) / 1e9;
}

uint64_t pct(std::vector<uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void section_post_rate(GpuMover& m, const Bufs& b, const Options& o) {
  // The cost of post() itself: half a ring, so it never waits for a slot.
  {
    const uint64_t n = m.config().ring_slots / 2;
    m.quiesce(10 * kSec);
    const uint64_t base = m.completed();
    const uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; ++i) {
      if (m.post(GpuMover::describe(b.src, b.dst, 0, b.words_d + (i % Bufs::kWords), CompletionOp::kStore32, 1)) !=
          PostResult::kPosted) {
        std::fprintf(stderr, "post rate: ring full after %llu posts\n", static_cast<unsigned long long>(i));
        std::exit(1);
      }
    }
    const double s = static_cast<double>(now_ns() - t0) / 1e9;
    wait_completed(m, base + n, 30 * kSec);
    std::printf("post() alone, %llu posts into an idle engine: %.1f M posts/s (%.0f ns each, launch included)\n",
                static_cast<unsigned long long>(n), static_cast<double>(n) / s / 1e6, s * 1e9 / static_cast<double>(n));
  }
  const uint64_t n = o.quick ? 500000 : 4000000;
  for (uint64_t size : {uint64_t{0}, uint64_t{64}, uint64_t{7578}}) {
    double post_s = 0;
    const double s = run_moves(m, b, b.dst, size, n, &post_s);
    std::printf("sustained, %llu moves of %llu B, one post() each: posts %.2f M/s, completed %.2f M/s, %.1f GB/s\n",
                static_cast<unsigned long long>(n), static_cast<unsigned long long>(size),
                static_cast<double>(n) / post_s / 1e6, static_cast<double>(n) / s / 1e6,
                static_cast<double>(n * size) / s / 1e9);
  }
}

void section_bandwidth(GpuMover& m, const Bufs& b, const Options& o, bool peer) {
  std::printf("| move size | moves | GB/s | M moves/s |  (%s)\n", peer ? "to the peer GPU" : "on this GPU");
  std::printf("|---|---|---|---|\n");
  for (uint64_t size : {4096ull, 7578ull, 8192ull, 16384ull, 65536ull, 262144ull, 1048576ull}) {
    const uint64_t total = o.quick ? (256ull << 20) : (4ull << 30);
    const uint64_t n = std::max<uint64_t>(256, total / size);
    run_moves(m, b, peer ? b.peer_dst : b.dst, size, std::min<uint64_t>(n, 1024), nullptr);  // warm-up
    const double s = run_moves(m, b, peer ? b.peer_dst : b.dst, size, n, nullptr);
    std::printf("| %llu | %llu | %.1f | %.2f |\n", static_cast<unsigned long long>(size),
                static_cast<unsigned long long>(n), static_cast<double>(n * size) / s / 1e9,
                static_cast<double>(n) / s / 1e6);
  }
}

void section_relaunch(GpuMover& m, const Bufs& b, const Options& o) {
  const int samples = o.quick ? 50 : 300;
  std::vector<uint64_t> cold, warm, cold_post;
  uint32_t v = 0x40000000;
  auto one = [&](std::vector<uint64_t>* lat, std::vector<uint64_t>* post_cost) {
    ++v;
    const uint64_t t0 = now_ns();
    m.post_wait(GpuMover::describe(b.src, b.dst, 4096, b.words_d, CompletionOp::kStore32, v), kSec);
    const uint64_t t1 = now_ns();
    while (__atomic_load_n(b.words_h, __ATOMIC_ACQUIRE) != v) {
      if (now_ns() - t0 > 2 * kSec) {
        std::fprintf(stderr, "relaunch: completion not seen in 2 s: %s\n", m.state_text().c_str());
        std::exit(1);
      }
    }
    lat->push_back(now_ns() - t0);
    if (post_cost) post_cost->push_back(t1 - t0);
  };
  for (int i = 0; i < samples; ++i) {
    const uint64_t t0 = now_ns();
    while (m.running()) {
      if (now_ns() - t0 > 2 * kSec) {
        std::fprintf(stderr, "relaunch: the engine did not stop in 2 s: %s\n", m.state_text().c_str());
        std::exit(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    one(&cold, &cold_post);  // the kernel is gone: this post launches it
    one(&warm, nullptr);     // right after: the kernel is still in its idle window
  }
  auto line = [](const char* what, const std::vector<uint64_t>& x) {
    std::printf("%s: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n", what, pct(x, 0.5) / 1e3, pct(x, 0.9) / 1e3,
                pct(x, 0.99) / 1e3, pct(x, 1.0) / 1e3);
  };
  std::printf("latency of one 4 KiB move, post -> completion seen by the host (%d samples, idle window %u us):\n",
              samples, m.config().idle_us);
  line("  idle engine (relaunch)", cold);
  line("  running engine       ", warm);
  line("  post() call that launched", cold_post);
  std::printf("  relaunch cost (p50 difference): %.1f us\n",
              (static_cast<double>(pct(cold, 0.5)) - static_cast<double>(pct(warm, 0.5))) / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd.append(i ? " " : "").append(argv[i]);  // not "" + string: GCC 12 -O3 -Wrestrict
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--device") {
      o.device = std::stoi(next());
    } else if (a == "--sms") {
      o.sms.clear();
      const std::string l = next();
      for (size_t p = 0; p < l.size();) {
        const size_t q = l.find(',', p);
        o.sms.push_back(std::stoi(l.substr(p, q == std::string::npos ? std::string::npos : q - p)));
        p = q == std::string::npos ? l.size() : q + 1;
      }
    } else if (a == "--threads") {
      o.threads = std::stoi(next());
    } else if (a == "--idle-us") {
      o.idle_us = static_cast<uint32_t>(std::stoul(next()));
    } else if (a == "--peer") {
      o.peer = std::stoi(next());
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of bench_gpu_mover.cpp)\n", a.c_str());
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no GPU: nothing to measure\n");
    return 77;
  }
  ck(cudaSetDevice(o.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  int peer = -1;
  if (o.peer == -1) {
    for (int d = 0; d < count && peer < 0; ++d) {
      int can = 0;
      if (d != o.device && cudaDeviceCanAccessPeer(&can, o.device, d) == cudaSuccess && can) peer = d;
    }
  } else if (o.peer >= 0) {
    peer = o.peer;
  }
  std::printf("command: %s\nGPU %d: %s, %d SMs, %d GPU(s) visible; peer GPU for the peer figures: %s\n", cmd.c_str(),
              o.device, prop.name, prop.multiProcessorCount, count, peer >= 0 ? std::to_string(peer).c_str() : "none");
  Bufs b;
  ck(cudaMalloc(&b.src, b.bytes), "cudaMalloc(src)");
  ck(cudaMalloc(&b.dst, b.bytes), "cudaMalloc(dst)");
  ck(cudaMemset(b.src, 0x5a, b.bytes), "cudaMemset");
  void* w = nullptr;
  ck(cudaHostAlloc(&w, sizeof(uint32_t) * Bufs::kWords, cudaHostAllocMapped), "cudaHostAlloc(words)");
  b.words_h = static_cast<uint32_t*>(w);
  std::memset(w, 0, sizeof(uint32_t) * Bufs::kWords);
  ck(cudaHostGetDevicePointer(reinterpret_cast<void**>(&b.words_d), w, 0), "cudaHostGetDevicePointer");
  if (peer >= 0) {
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) ck(e, "cudaDeviceEnablePeerAccess");
    cudaGetLastError();
    ck(cudaSetDevice(peer), "cudaSetDevice(peer)");
    ck(cudaMalloc(&b.peer_dst, b.bytes), "cudaMalloc(peer dst)");
    ck(cudaSetDevice(o.device), "cudaSetDevice");
  }
  ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (int sms : o.sms) {
    GpuMoverConfig c;
    c.device = o.device;
    c.sms = sms;
    c.threads = o.threads;
    c.idle_us = o.idle_us;
    GpuMover m(c);
    std::printf("\n== engine: %d SMs (of %d), %d threads per block, idle window %u us, ring %u slots ==\n", m.sms(),
                prop.multiProcessorCount, m.threads(), c.idle_us, c.ring_slots);
    section_post_rate(m, b, o);
    section_bandwidth(m, b, o, false);
    if (peer >= 0) section_bandwidth(m, b, o, true);
    section_relaunch(m, b, o);
  }
  return 0;
}
