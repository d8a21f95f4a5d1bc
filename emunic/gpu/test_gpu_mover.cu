// emunic/gpu/test_gpu_mover.cu — the GPU mover's test program (no gtest). Each case prints what it
// measured and PASS or FAIL; exit 0 when all pass, 1 when one fails, 77 without a GPU (skip), 3
// when a mutation run (--no-fence, --no-preload) did not produce the failure it exists to show.
//
//   copy        sizes 0 B .. 5 MiB, aligned and not, split and not; every completion op; the bytes
//               around each destination untouched
//   coresident  a user kernel holds every SM but the engine's (all its blocks co-resident, spinning):
//               the engine's first launch after creation still completes work (the preload), and
//               the engine fits in the SMs it reports
//   sync        after a burst: cudaDeviceSynchronize and cudaFree return within the idle window
//               (plus margin), one launch per burst
//   race        thousands of bursts separated by gaps around the idle window: no post is lost
//               when it lands while the kernel decides to leave
//   capture     graph capture on another stream (global mode) while the engine relaunches, from
//               another thread and from the capturing thread itself
//   fence       message passing: a consumer kernel waits for each completion word, then checks the
//               data (this GPU; with two GPUs also data on the peer); no stale data may be seen
//
//   refusals    bad descriptors (also without a GPU) and bad configurations: InvalidArgument naming
//               what is wrong
//
// Options: --case NAME (one case), --device N, --sms N, --no-fence (the kernel variant without the
// completion fence: the fence case must then see stale data), --no-preload (the coresident case
// must then see the first launch wait), --fence-rounds N.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/gpu_runtime.h"
#include "common/portability.h"
#include "gpu_mover.h"

namespace {

using namespace anyep;
using namespace anyep_emunic::gpu;
using port::Order;
using port::Scope;

constexpr uint64_t kMs = 1000ull * 1000ull;
constexpr uint64_t kSec = 1000ull * kMs;

uint64_t now_ns() { return port::now_ns(); }

void die_cuda(cudaError_t e, const char* what, int line) {
  std::fprintf(stderr, "FAIL (line %d) %s: %s\n", line, what, cudaGetErrorString(e));
  std::exit(1);
}
#define CK(x)                                          \
  do {                                                 \
    const cudaError_t e_ = (x);                        \
    if (e_ != cudaSuccess) die_cuda(e_, #x, __LINE__); \
  } while (0)

struct Options {
  int device = 0;
  int sms = 16;
  bool fence = true;
  bool preload = true;
  std::string only;
  int fence_rounds = 256;
};

int g_failed = 0;
bool g_mutation_missed = false;

// A failure ends the program at once: an engine that lost work may also never leave, and the next
// cudaFree or synchronize would then wait for it forever.
void report(const char* name, bool ok, const std::string& what) {
  std::printf("[%s] %s: %s\n", ok ? "PASS" : "FAIL", name, what.c_str());
  std::fflush(stdout);
  if (!ok) {
    ++g_failed;
    std::_Exit(1);
  }
}

// Pinned, mapped host memory: the host view and the device view.
template <typename T>
struct Mapped {
  T* h = nullptr;
  T* d = nullptr;
  size_t n = 0;
  explicit Mapped(size_t count) : n(count) {
    void* p = nullptr;
    CK(cudaHostAlloc(&p, sizeof(T) * count, cudaHostAllocMapped | cudaHostAllocPortable));
    h = static_cast<T*>(p);
    std::memset(static_cast<void*>(h), 0, sizeof(T) * count);
    CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0));
  }
  ~Mapped() { cudaFreeHost(h); }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
};

template <typename T>
T load_acq(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

// Waits until word == want (acquire), at most timeout_ns. Returns the time waited, or ~0 on timeout.
uint64_t wait_word(const uint32_t* word, uint32_t want, uint64_t timeout_ns) {
  const uint64_t t0 = now_ns();
  while (load_acq(word) != want) {
    if (now_ns() - t0 > timeout_ns) return ~uint64_t{0};
  }
  return now_ns() - t0;
}

uint8_t pattern(uint64_t i) { return static_cast<uint8_t>((i * 2654435761ull) >> 13) | 1u; }

__global__ void fill_pattern(uint8_t* p, uint64_t n) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>((i * 2654435761ull) >> 13) | 1u;
}

// A user's kernel that must have all its blocks resident at once (a cooperative kernel's shape):
// every block arrives, waits for all (bounded), then spins until the host releases it (bounded).
// status: 1 all arrived; 2 not all arrived in time; 3 released; 4 not released in time.
__global__ void hold_sms(uint32_t* arrived, uint32_t* status, const uint32_t* release, uint64_t timeout_ns) {
  if (threadIdx.x == 0) {
    port::atomic_add<Order::relaxed, Scope::device>(arrived, 1u);
    const uint64_t t0 = port::now_ns();
    bool all = true;
    while (port::load_acquire_device(arrived) < gridDim.x) {
      if (port::now_ns() - t0 > timeout_ns) {
        all = false;
        break;
      }
    }
    if (blockIdx.x == 0) port::store_release_system(status, all ? 1u : 2u);
    bool released = true;
    while (port::load_acquire_system(release) == 0) {
      if (port::now_ns() - t0 > 4 * timeout_ns) {
        released = false;
        break;
      }
      port::spin_pause();
    }
    if (blockIdx.x == 0) port::store_release_system(status, released ? (all ? 3u : 2u) : 4u);
  }
  __syncthreads();
}

__global__ void bump(uint32_t* counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *counter += 1;
}

// Message passing, the consumer: item k's completion word flags[k] (set to 1 by the engine), then
// the first and last 16 bytes of its message (never written before: zero means stale). Checks the
// last 16 bytes first, the ones the engine wrote last.
struct FenceSeen {
  unsigned long long stale;
  unsigned long long timeouts;
  unsigned long long checked;
  unsigned long long first_stale_item;
};

__global__ void consume(const uint32_t* flags, const uint8_t* dst, const uint8_t* src, uint64_t items,
                        uint32_t msg_bytes, uint32_t msgs_per_round, FenceSeen* seen, uint64_t timeout_ns) {
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t stale = 0, timeouts = 0, checked = 0;
  const uint64_t deadline = port::now_ns() + timeout_ns;  // for the whole run: a stuck engine ends it
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < items; k += nthreads) {
    bool ok = true;
    while (port::atomic_load<Order::acquire, Scope::system>(flags + k) == 0) {
      if (port::now_ns() > deadline) {
        ok = false;
        break;
      }
    }
    if (!ok) {
      ++timeouts;
      continue;
    }
    const uint64_t m = k % msgs_per_round;
    const uint8_t* d = dst + k * msg_bytes;
    const uint8_t* s = src + m * msg_bytes;
    const uint4 last = port::load_l2(reinterpret_cast<const uint4*>(d + msg_bytes - 16));
    const uint4 first = port::load_l2(reinterpret_cast<const uint4*>(d));
    const uint4 want_last = *reinterpret_cast<const uint4*>(s + msg_bytes - 16);
    const uint4 want_first = *reinterpret_cast<const uint4*>(s);
    ++checked;
    if (last.x != want_last.x || last.y != want_last.y || last.z != want_last.z || last.w != want_last.w ||
        first.x != want_first.x || first.y != want_first.y || first.z != want_first.z || first.w != want_first.w) {
      ++stale;
      atomicMin(&seen->first_stale_item, static_cast<unsigned long long>(k));
    }
  }
  atomicAdd(&seen->stale, static_cast<unsigned long long>(stale));
  atomicAdd(&seen->timeouts, static_cast<unsigned long long>(timeouts));
  atomicAdd(&seen->checked, static_cast<unsigned long long>(checked));
}

GpuMoverConfig base_config(const Options& o) {
  GpuMoverConfig c;
  c.device = o.device;
  c.sms = o.sms;
  c.fence = o.fence;
  c.preload = o.preload;
  // Reserving shared memory sets a kernel attribute, which may load the module as well: the
  // no-preload mutation leaves that out too, or it would show nothing.
  c.exclusive_sms = o.preload;
  return c;
}

// ---- refusals ------------------------------------------------------------------------------------
// Bad descriptors (no GPU needed) and, with a GPU, bad configurations: each refused with
// InvalidArgument naming what is wrong.
void case_refusals(bool have_gpu, const Options& o) {
  struct Refusal {
    const char* what;
    std::function<void()> fn;
    const char* must_say;
  };
  static uint64_t word[2];
  char* const p = reinterpret_cast<char*>(word);
  std::vector<Refusal> r = {
      {"bytes over the limit", [&] { GpuMover::describe(p, p, uint64_t{1} << 32, nullptr); }, "over the limit"},
      {"null source", [&] { GpuMover::describe(nullptr, p, 16, nullptr); }, "null source"},
      {"null destination", [&] { GpuMover::describe(p, nullptr, 16, nullptr); }, "null destination"},
      {"op without word", [&] { GpuMover::describe(p, p, 16, nullptr, CompletionOp::kStore32, 1); }, "needs an op"},
      {"word without op", [&] { GpuMover::describe(p, p, 16, word, CompletionOp::kNone, 1); }, "needs an op"},
      {"misaligned 32-bit word", [&] { GpuMover::describe(p, p, 16, p + 2, CompletionOp::kStore32, 1); },
       "not 4-byte aligned"},
      {"misaligned 64-bit word", [&] { GpuMover::describe(p, p, 16, p + 4, CompletionOp::kAdd64, 1); },
       "not 8-byte aligned"},
      {"raw descriptor, op bits without address",
       [&] {
         MoveDescriptor d{};
         d.completion = 1;
         check_descriptor(d);
       },
       "without a completion word"},
      {"raw descriptor, the slot-read mark as size",
       [&] {
         MoveDescriptor d{};
         d.src = d.dst = 64;
         d.bytes = kSlotFree;
         check_descriptor(d);
       },
       "over the limit"},
  };
  if (have_gpu) {
    auto config = [&](const std::function<void(GpuMoverConfig&)>& edit) {
      GpuMoverConfig c = base_config(o);
      edit(c);
      GpuMover m(c);
    };
    r.push_back({"sms 0", [&] { config([](GpuMoverConfig& c) { c.sms = 0; }); }, "sms=0"});
    r.push_back({"sms over the GPU's", [&] { config([](GpuMoverConfig& c) { c.sms = 100000; }); }, "sms=100000"});
    r.push_back({"threads 48", [&] { config([](GpuMoverConfig& c) { c.threads = 48; }); }, "threads=48"});
    r.push_back({"ring 100", [&] { config([](GpuMoverConfig& c) { c.ring_slots = 100; }); }, "ring_slots=100"});
    r.push_back({"idle 0", [&] { config([](GpuMoverConfig& c) { c.idle_us = 0; }); }, "idle_us=0"});
    r.push_back({"chunk 1000", [&] { config([](GpuMoverConfig& c) { c.chunk_bytes = 1000; }); }, "chunk_bytes=1000"});
    r.push_back({"split under chunk",
                 [&] {
                   config([](GpuMoverConfig& c) {
                     c.chunk_bytes = 8192;
                     c.split_bytes = 4096;
                   });
                 },
                 "split_bytes=4096"});
    r.push_back({"device 99", [&] { config([](GpuMoverConfig& c) { c.device = 99; }); }, "device=99"});
  }
  std::string bad;
  for (const Refusal& x : r) {
    try {
      x.fn();
      bad += std::string(" [") + x.what + ": accepted]";
    } catch (const anyep::InvalidArgument& e) {
      if (std::string(e.what()).find(x.must_say) == std::string::npos)
        bad += std::string(" [") + x.what + ": said '" + e.what() + "', not '" + x.must_say + "']";
    } catch (const std::exception& e) {
      bad += std::string(" [") + x.what + ": " + e.what() + " (not InvalidArgument)]";
    }
  }
  report("refusals", bad.empty(),
         bad.empty() ? std::to_string(r.size()) + " bad descriptors" + (have_gpu ? " and configurations" : "") +
                           " refused, each naming what is wrong"
                     : bad);
}

// ---- copy ----------------------------------------------------------------------------------------
void case_copy(const Options& o) {
  struct Shape {
    uint64_t bytes, soff, doff;
    CompletionOp op;
  };
  const std::vector<Shape> shapes = {
      {0, 0, 0, CompletionOp::kStore32},
      {1, 0, 0, CompletionOp::kStore32},
      {15, 1, 1, CompletionOp::kAdd32},
      {16, 0, 0, CompletionOp::kStore32},
      {17, 3, 3, CompletionOp::kAdd64},
      {100, 5, 9, CompletionOp::kStore32},
      {4096, 0, 0, CompletionOp::kStore32},
      {7578, 0, 0, CompletionOp::kAdd64},
      {65536, 0, 0, CompletionOp::kStore32},
      {65536 + 3, 16, 16, CompletionOp::kStore32},
      {200000, 0, 0, CompletionOp::kAdd32},
      {1u << 20, 0, 0, CompletionOp::kStore32},
      {3 * (1u << 20) + 5, 7, 7, CompletionOp::kStore32},
      {5 * (1u << 20), 1, 2, CompletionOp::kAdd64},
  };
  constexpr uint64_t kRegion = 6ull << 20, kGuard = 64;
  const uint64_t src_bytes = kRegion;
  const uint64_t dst_bytes = kRegion * shapes.size();
  CK(cudaSetDevice(o.device));
  uint8_t *src = nullptr, *dst = nullptr;
  uint32_t* dev_words = nullptr;  // [0]: 32-bit add counter; [2..3]: 64-bit add counter
  CK(cudaMalloc(&src, src_bytes));
  CK(cudaMalloc(&dst, dst_bytes));
  CK(cudaMalloc(&dev_words, 64));
  CK(cudaMemset(dst, 0, dst_bytes));
  CK(cudaMemset(dev_words, 0, 64));
  fill_pattern<<<256, 256>>>(src, src_bytes);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  Mapped<uint32_t> words(shapes.size());
  uint32_t expect_add32 = 0;
  uint64_t expect_add64 = 0;
  {
    GpuMover mover(base_config(o));
    for (size_t k = 0; k < shapes.size(); ++k) {
      const Shape& s = shapes[k];
      void* word = words.d + k;
      uint32_t value = static_cast<uint32_t>(k + 1);
      if (s.op == CompletionOp::kAdd32) {
        word = dev_words;
        value = static_cast<uint32_t>(k + 100);
        expect_add32 += value;
      } else if (s.op == CompletionOp::kAdd64) {
        word = dev_words + 2;
        value = static_cast<uint32_t>(k + 1000);
        expect_add64 += value;
      }
      mover.post_wait(GpuMover::describe(src + s.soff, dst + k * kRegion + kGuard + s.doff, s.bytes, word, s.op, value),
                      5 * kSec);
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (shapes[k].op != CompletionOp::kStore32) continue;
      if (wait_word(words.h + k, static_cast<uint32_t>(k + 1), 5 * kSec) == ~uint64_t{0}) {
        report("copy", false,
               "completion of shape " + std::to_string(k) + " (" + std::to_string(shapes[k].bytes) +
                   " B) not seen in 5 s; " + mover.state_text());
        return;
      }
    }
    mover.quiesce(5 * kSec);  // the adds land in device memory: wait for the engine to finish them
  }
  std::vector<uint8_t> h(dst_bytes);
  CK(cudaMemcpy(h.data(), dst, dst_bytes, cudaMemcpyDeviceToHost));
  uint32_t got32 = 0;
  uint64_t got64 = 0;
  CK(cudaMemcpy(&got32, dev_words, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&got64, dev_words + 2, 8, cudaMemcpyDeviceToHost));
  std::string bad;
  for (size_t k = 0; k < shapes.size() && bad.empty(); ++k) {
    const Shape& s = shapes[k];
    const uint8_t* r = h.data() + k * kRegion;
    const uint64_t start = kGuard + s.doff, end = start + s.bytes;
    for (uint64_t i = 0; i < kRegion; ++i) {
      const uint8_t want = (i >= start && i < end) ? pattern(s.soff + (i - start)) : 0;
      if (r[i] != want) {
        bad = "shape " + std::to_string(k) + " (" + std::to_string(s.bytes) + " B, src+" + std::to_string(s.soff) +
              " dst+" + std::to_string(s.doff) + "): byte " + std::to_string(i) + " of its region is " +
              std::to_string(r[i]) + ", want " + std::to_string(want) + (i < start || i >= end ? " (outside)" : "");
        break;
      }
    }
  }
  if (bad.empty() && got32 != expect_add32)
    bad = "32-bit add counter " + std::to_string(got32) + ", want " + std::to_string(expect_add32);
  if (bad.empty() && got64 != expect_add64)
    bad = "64-bit add counter " + std::to_string(got64) + ", want " + std::to_string(expect_add64);
  report("copy", bad.empty(),
         bad.empty()
             ? std::to_string(shapes.size()) + " shapes (0 B .. 5 MiB, misaligned, split), all ops, guards intact"
             : bad);
  CK(cudaFree(src));
  CK(cudaFree(dst));
  CK(cudaFree(dev_words));
}

// ---- coresident ----------------------------------------------------------------------------------
void case_coresident(const Options& o) {
  CK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, o.device));
  GpuMover mover(base_config(o));  // created before the user's kernel, as a provider would be
  const int user_blocks = prop.multiProcessorCount - mover.sms();
  const size_t smem = prop.sharedMemPerMultiprocessor / 2 + 1024;  // one block per SM, like the engine
  CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&hold_sms), cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem)));
  uint32_t* arrived = nullptr;
  CK(cudaMalloc(&arrived, 4));
  CK(cudaMemset(arrived, 0, 4));
  CK(cudaDeviceSynchronize());
  Mapped<uint32_t> ctl(4);  // [0] status, [1] release
  Mapped<uint32_t> done(64);
  uint8_t *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, 1 << 20));
  CK(cudaMalloc(&dst, 1 << 20));
  cudaStream_t user = nullptr;
  CK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  bool ok = true;
  std::string what;
  if (user_blocks > 0) {
    hold_sms<<<user_blocks, 128, smem, user>>>(arrived, ctl.d, ctl.d + 1, 2 * kSec);
    CK(cudaGetLastError());
    if (wait_word(ctl.h, 1, 3 * kSec) == ~uint64_t{0}) {
      ok = false;
      what = "the user kernel's " + std::to_string(user_blocks) + " blocks were not all resident (status " +
             std::to_string(load_acq(ctl.h)) + ")";
    }
  }
  uint64_t waited = 0;
  if (ok) {
    const uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < 64; ++i)
      mover.post_wait(
          GpuMover::describe(src + i * 16384, dst + i * 16384, 16384, done.d + i, CompletionOp::kStore32, 1), kSec);
    for (uint32_t i = 0; i < 64 && ok; ++i)
      if (wait_word(done.h + i, 1, kSec) == ~uint64_t{0}) ok = false;
    waited = now_ns() - t0;
    if (!ok) what = "64 moves not complete after 1 s while the user kernel held the other SMs; " + mover.state_text();
  }
  __atomic_store_n(ctl.h + 1, 1u, __ATOMIC_RELEASE);
  CK(cudaStreamSynchronize(user));
  const uint32_t status = load_acq(ctl.h);
  if (ok && user_blocks > 0 && status != 3) {
    ok = false;
    what = "the user kernel ended with status " + std::to_string(status) + " (3: held every other SM, released)";
  }
  if (ok)
    what = "engine " + std::to_string(mover.sms()) + " SMs + user kernel " + std::to_string(user_blocks) +
           " SMs (one block each, all resident) on " + std::to_string(prop.multiProcessorCount) +
           "; the first post after creation completed 64 moves in " + std::to_string(waited / 1000) + " us";
  if (!o.preload) {
    // Mutation run: without the preload the first launch is expected to wait behind the user kernel.
    std::printf("[%s] coresident without preload: %s\n", ok ? "NOTE" : "EXPECTED", what.c_str());
    if (ok) {
      std::printf("  the first launch did not wait here (module loading eager, or already loaded): not shown\n");
      g_mutation_missed = true;
    }
  } else {
    report("coresident", ok, what);
  }
  CK(cudaStreamDestroy(user));
  CK(cudaFree(arrived));
  CK(cudaFree(src));
  CK(cudaFree(dst));
}

// Runs fn in a thread; returns its duration, or ~0 when it did not return within timeout_ns (the
// program then cannot go on: the caller reports and exits).
uint64_t timed_bounded(const std::function<void()>& fn, uint64_t timeout_ns) {
  std::atomic<bool> done{false};
  const uint64_t t0 = now_ns();
  std::thread t([&] {
    fn();
    done.store(true, std::memory_order_release);
  });
  while (!done.load(std::memory_order_acquire)) {
    if (now_ns() - t0 > timeout_ns) {
      t.detach();
      return ~uint64_t{0};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(5));
  }
  const uint64_t dt = now_ns() - t0;
  t.join();
  return dt;
}

// ---- sync ----------------------------------------------------------------------------------------
void case_sync(const Options& o) {
  CK(cudaSetDevice(o.device));
  GpuMoverConfig c = base_config(o);
  c.idle_us = 30;
  GpuMover mover(c);
  constexpr uint32_t kBurst = 2000, kBursts = 20;
  constexpr uint64_t kBytes = 4096;
  uint8_t *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, kBurst * kBytes));
  CK(cudaMalloc(&dst, kBurst * kBytes));
  Mapped<uint32_t> done(kBurst);
  std::vector<uint64_t> sync_ns, free_ns;
  uint64_t max_launches = 0;
  for (uint32_t b = 1; b <= kBursts; ++b) {
    void* scratch = nullptr;
    CK(cudaMalloc(&scratch, 1 << 20));
    const uint64_t l0 = mover.launches();
    for (uint32_t i = 0; i < kBurst; ++i)
      mover.post_wait(
          GpuMover::describe(src + i * kBytes, dst + i * kBytes, kBytes, done.d + i, CompletionOp::kStore32, b), kSec);
    for (uint32_t i = 0; i < kBurst; ++i) {
      if (wait_word(done.h + i, b, 2 * kSec) == ~uint64_t{0}) {
        report("sync", false,
               "burst " + std::to_string(b) + " move " + std::to_string(i) + " not complete in 2 s; " +
                   mover.state_text());
        return;
      }
    }
    max_launches = std::max(max_launches, mover.launches() - l0);
    // The engine has no work queued now: the user's synchronize must not wait for more than the
    // idle window (and the kernel's exit).
    const uint64_t ds = timed_bounded([] { CK(cudaDeviceSynchronize()); }, 2 * kSec);
    if (ds == ~uint64_t{0}) {
      report("sync", false,
             "cudaDeviceSynchronize did not return within 2 s of the burst's last completion; " + mover.state_text());
      std::fflush(stdout);
      std::_Exit(1);
    }
    sync_ns.push_back(ds);
    if (mover.running()) {
      report("sync", false,
             "the engine still says running after cudaDeviceSynchronize returned; " + mover.state_text());
      return;
    }
    // cudaFree waits for the device too; the engine is gone, so it must be quick. Post a burst
    // first so the kernel is running when cudaFree is called.
    for (uint32_t i = 0; i < 16; ++i)
      mover.post_wait(
          GpuMover::describe(src + i * kBytes, dst + i * kBytes, kBytes, done.d + i, CompletionOp::kStore32, 1000 + b),
          kSec);
    for (uint32_t i = 0; i < 16; ++i) wait_word(done.h + i, 1000 + b, 2 * kSec);
    const uint64_t fs = timed_bounded([scratch] { CK(cudaFree(scratch)); }, 2 * kSec);
    if (fs == ~uint64_t{0}) {
      report("sync", false, "cudaFree did not return within 2 s; " + mover.state_text());
      std::fflush(stdout);
      std::_Exit(1);
    }
    free_ns.push_back(fs);
  }
  std::sort(sync_ns.begin(), sync_ns.end());
  std::sort(free_ns.begin(), free_ns.end());
  // Margin over the idle window: the kernel's exit, a launch's teardown and the host scheduler.
  const uint64_t limit = c.idle_us * 1000ull + 20 * kMs;
  const bool ok = sync_ns.back() < limit && free_ns.back() < limit && max_launches <= 3;
  report("sync", ok,
         "idle window " + std::to_string(c.idle_us) + " us; cudaDeviceSynchronize after a burst: median " +
             std::to_string(sync_ns[sync_ns.size() / 2] / 1000) + " us, max " + std::to_string(sync_ns.back() / 1000) +
             " us; cudaFree with the engine running: median " + std::to_string(free_ns[free_ns.size() / 2] / 1000) +
             " us, max " + std::to_string(free_ns.back() / 1000) + " us (limit " + std::to_string(limit / 1000) +
             " us); launches per burst of " + std::to_string(kBurst) + " posts: at most " +
             std::to_string(max_launches) + " (limit 3)");
  CK(cudaFree(src));
  CK(cudaFree(dst));
}

// ---- race ----------------------------------------------------------------------------------------
void case_race(const Options& o) {
  CK(cudaSetDevice(o.device));
  GpuMoverConfig c = base_config(o);
  c.idle_us = 20;
  GpuMover mover(c);
  constexpr uint32_t kBursts = 4000;
  uint8_t *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, 64 * 64));
  CK(cudaMalloc(&dst, 64 * 64));
  Mapped<uint32_t> done(8);
  std::mt19937 rng(12345);
  uint64_t worst = 0;
  const uint64_t l0 = mover.launches();
  for (uint32_t b = 1; b <= kBursts; ++b) {
    // Gaps from 0 to 3x the idle window: many posts land while the kernel is deciding to leave.
    const uint64_t gap = rng() % (3ull * c.idle_us * 1000);
    const uint64_t g0 = now_ns();
    while (now_ns() - g0 < gap) {
    }
    const uint32_t n = 1 + rng() % 8;
    const uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < n; ++i)
      mover.post_wait(GpuMover::describe(src + i * 64, dst + i * 64, 64, done.d + i, CompletionOp::kStore32, b), kSec);
    for (uint32_t i = 0; i < n; ++i) {
      if (wait_word(done.h + i, b, 2 * kSec) == ~uint64_t{0}) {
        report("race", false,
               "burst " + std::to_string(b) + " (gap " + std::to_string(gap / 1000) + " us) move " + std::to_string(i) +
                   " lost: not complete in 2 s; " + mover.state_text());
        return;
      }
    }
    worst = std::max(worst, now_ns() - t0);
  }
  report("race", true,
         std::to_string(kBursts) + " bursts with gaps 0.." + std::to_string(3 * c.idle_us) + " us: none lost; " +
             std::to_string(mover.launches() - l0) + " launches; slowest burst " + std::to_string(worst / 1000) +
             " us");
  CK(cudaFree(src));
  CK(cudaFree(dst));
}

// ---- capture -------------------------------------------------------------------------------------
void case_capture(const Options& o) {
  CK(cudaSetDevice(o.device));
  GpuMoverConfig c = base_config(o);
  c.idle_us = 20;
  GpuMover mover(c);
  uint32_t* counter = nullptr;
  CK(cudaMalloc(&counter, 4));
  CK(cudaMemset(counter, 0, 4));
  uint8_t *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, 4096));
  CK(cudaMalloc(&dst, 4096));
  CK(cudaDeviceSynchronize());
  Mapped<uint32_t> done(1);
  std::atomic<bool> stop{false};
  std::string poster_error;
  uint64_t posts = 0;
  const uint64_t l0 = mover.launches();
  std::thread poster([&] {
    CK(cudaSetDevice(o.device));
    try {
      for (uint32_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
        mover.post_wait(GpuMover::describe(src, dst, 4096, done.d, CompletionOp::kStore32, v), kSec);
        if (wait_word(done.h, v, 2 * kSec) == ~uint64_t{0}) {
          poster_error = "move " + std::to_string(v) + " not complete in 2 s; " + mover.state_text();
          return;
        }
        ++posts;
        std::this_thread::sleep_for(std::chrono::microseconds(25 + v % 40));  // around the idle window
      }
    } catch (const std::exception& e) {
      poster_error = e.what();
    }
  });
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kGraphs = 200, kNodes = 10;
  std::string bad;
  for (int g = 0; g < kGraphs && bad.empty(); ++g) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    if (e == cudaSuccess) {
      for (int k = 0; k < kNodes; ++k) bump<<<1, 32, 0, s>>>(counter);
      e = cudaGetLastError();
      const cudaError_t e2 = cudaStreamEndCapture(s, &graph);
      if (e == cudaSuccess) e = e2;
    }
    size_t nodes = 0;
    if (e == cudaSuccess) e = cudaGraphGetNodes(graph, nullptr, &nodes);
    if (e == cudaSuccess && nodes != kNodes)
      bad = "graph " + std::to_string(g) + " captured " + std::to_string(nodes) + " nodes, want " +
            std::to_string(kNodes);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (e == cudaSuccess) e = cudaGraphLaunch(exec, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) bad = "capture " + std::to_string(g) + ": " + cudaGetErrorString(e);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  stop.store(true);
  poster.join();
  uint32_t got = 0;
  CK(cudaMemcpy(&got, counter, 4, cudaMemcpyDeviceToHost));
  if (bad.empty() && got != static_cast<uint32_t>(kGraphs * kNodes))
    bad = "the graphs bumped the counter " + std::to_string(got) + " times, want " + std::to_string(kGraphs * kNodes);
  if (bad.empty() && !poster_error.empty()) bad = "the poster thread: " + poster_error;
  const uint64_t launches = mover.launches() - l0;
  if (bad.empty() && launches < 10)
    bad = "only " + std::to_string(launches) + " engine launches during the captures: the case did not test relaunches";
  // The capturing thread itself posts in the middle of its capture, with the engine stopped: the
  // post launches the engine (on its own stream) while this thread captures.
  constexpr int kSameThread = 50;
  int launched_inside = 0;
  for (int g = 0; g < kSameThread && bad.empty(); ++g) {
    const uint64_t w0 = now_ns();
    while (mover.running()) {
      if (now_ns() - w0 > 2 * kSec) {
        bad = "the engine did not stop within 2 s; " + mover.state_text();
        break;
      }
    }
    if (!bad.empty()) break;
    const uint32_t v = 0x10000000u + static_cast<uint32_t>(g);
    const uint64_t before = mover.launches();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    if (e == cudaSuccess) {
      for (int k = 0; k < kNodes / 2; ++k) bump<<<1, 32, 0, s>>>(counter);
      try {
        mover.post_wait(GpuMover::describe(src, dst, 4096, done.d, CompletionOp::kStore32, v), kSec);
      } catch (const std::exception& ex) {
        bad = std::string("post inside a capture: ") + ex.what();
      }
      for (int k = kNodes / 2; k < kNodes; ++k) bump<<<1, 32, 0, s>>>(counter);
      e = cudaGetLastError();
      const cudaError_t e2 = cudaStreamEndCapture(s, &graph);
      if (e == cudaSuccess) e = e2;
    }
    launched_inside += mover.launches() > before ? 1 : 0;
    size_t nodes = 0;
    if (e == cudaSuccess) e = cudaGraphGetNodes(graph, nullptr, &nodes);
    if (e == cudaSuccess && nodes != kNodes && bad.empty())
      bad = "capture with a post inside: " + std::to_string(nodes) + " nodes, want " + std::to_string(kNodes);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (e == cudaSuccess) e = cudaGraphLaunch(exec, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess && bad.empty()) bad = "capture with a post inside: " + std::string(cudaGetErrorString(e));
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (bad.empty() && wait_word(done.h, v, 2 * kSec) == ~uint64_t{0})
      bad = "the move posted inside capture " + std::to_string(g) + " did not complete; " + mover.state_text();
  }
  CK(cudaMemcpy(&got, counter, 4, cudaMemcpyDeviceToHost));
  if (bad.empty() && got != static_cast<uint32_t>((kGraphs + kSameThread) * kNodes))
    bad = "after the same-thread captures the counter is " + std::to_string(got) + ", want " +
          std::to_string((kGraphs + kSameThread) * kNodes);
  if (bad.empty() && launched_inside < kSameThread / 2)
    bad = "only " + std::to_string(launched_inside) + " of " + std::to_string(kSameThread) +
          " posts inside a capture launched the engine: the case did not test that";
  report("capture", bad.empty(),
         bad.empty() ? std::to_string(kGraphs) + " global-mode captures of " + std::to_string(kNodes) +
                           " kernels each, all exact, while another thread's " + std::to_string(posts) +
                           " moves completed over " + std::to_string(launches) + " engine launches; " +
                           std::to_string(kSameThread) + " more with a post inside the capture (" +
                           std::to_string(launched_inside) + " of them launched the engine), all exact"
                     : bad);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(counter));
  CK(cudaFree(src));
  CK(cudaFree(dst));
}

// ---- fence ---------------------------------------------------------------------------------------
// Returns the stale count (or ~0 on a timeout).
uint64_t fence_run(const Options& o, int data_device, uint32_t msg_bytes, std::string* text) {
  CK(cudaSetDevice(o.device));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, o.device));
  const uint32_t per_round = 4096;
  const uint64_t items = static_cast<uint64_t>(per_round) * o.fence_rounds;
  uint8_t *src = nullptr, *dst = nullptr;
  uint32_t* flags = nullptr;
  FenceSeen* seen = nullptr;
  CK(cudaMalloc(&src, static_cast<uint64_t>(per_round) * msg_bytes));
  CK(cudaMalloc(&flags, items * 4));
  CK(cudaMalloc(&seen, sizeof(FenceSeen)));
  CK(cudaMemset(flags, 0, items * 4));
  CK(cudaMemset(seen, 0, sizeof(FenceSeen)));
  const FenceSeen init{0, 0, 0, ~0ull};
  CK(cudaMemcpy(seen, &init, sizeof init, cudaMemcpyHostToDevice));
  fill_pattern<<<64, 256>>>(src, static_cast<uint64_t>(per_round) * msg_bytes);
  CK(cudaGetLastError());
  CK(cudaSetDevice(data_device));
  CK(cudaMalloc(&dst, items * msg_bytes));
  CK(cudaMemset(dst, 0, items * msg_bytes));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(o.device));
  CK(cudaDeviceSynchronize());
  GpuMover mover(base_config(o));
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // The consumer takes the SMs the engine leaves (small blocks: they fit beside the engine's).
  const int blocks = std::max(1, prop.multiProcessorCount - mover.sms());
  consume<<<blocks, 256, 0, s>>>(flags, dst, src, items, msg_bytes, per_round, seen, 120 * kSec);
  CK(cudaGetLastError());
  const uint64_t t0 = now_ns();
  std::vector<MoveDescriptor> batch(256);
  for (uint64_t k = 0; k < items; k += batch.size()) {
    const size_t n = std::min<uint64_t>(batch.size(), items - k);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t item = k + i;
      batch[i] = GpuMover::describe(src + (item % per_round) * msg_bytes, dst + item * msg_bytes, msg_bytes,
                                    flags + item, CompletionOp::kStore32, 1);
    }
    size_t off = 0;
    const uint64_t w0 = now_ns();
    while (off < n) {
      off += mover.post_batch(batch.data() + off, n - off);
      if (now_ns() - w0 > 5 * kSec) throw TimeoutError("fence case: the ring stayed full 5 s; " + mover.state_text());
    }
  }
  CK(cudaStreamSynchronize(s));
  const uint64_t dt = now_ns() - t0;
  FenceSeen got{};
  CK(cudaMemcpy(&got, seen, sizeof got, cudaMemcpyDeviceToHost));
  *text = std::to_string(got.checked) + " of " + std::to_string(items) + " messages of " + std::to_string(msg_bytes) +
          " B (data on GPU " + std::to_string(data_device) + ") checked in " + std::to_string(dt / 1000000) +
          " ms: " + std::to_string(got.stale) + " stale" +
          (got.stale ? " (first at item " + std::to_string(got.first_stale_item) + ")" : std::string()) + ", " +
          std::to_string(got.timeouts) + " completions never seen";
  CK(cudaStreamDestroy(s));
  CK(cudaFree(src));
  CK(cudaFree(flags));
  CK(cudaFree(seen));
  CK(cudaFree(dst));
  return got.timeouts ? ~uint64_t{0} : got.stale;
}

void case_fence(const Options& o) {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  std::vector<int> data_devices = {o.device};
  for (int d = 0; d < count; ++d) {
    if (d == o.device) continue;
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, o.device, d));
    if (!can) continue;
    CK(cudaSetDevice(o.device));
    const cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) die_cuda(e, "cudaDeviceEnablePeerAccess", __LINE__);
    cudaGetLastError();
    data_devices.push_back(d);
    break;
  }
  uint64_t total_stale = 0;
  bool timeouts = false;
  for (int dd : data_devices) {
    for (uint32_t msg : {16u, 512u}) {
      std::string text;
      const uint64_t stale = fence_run(o, dd, msg, &text);
      if (stale == ~uint64_t{0})
        timeouts = true;
      else
        total_stale += stale;
      if (o.fence) {
        report("fence", stale == 0, text);
      } else {
        std::printf("[NOTE] fence (mutation: no fence): %s\n", text.c_str());
      }
    }
  }
  if (!o.fence) {
    if (timeouts) {
      report("fence mutation", false, "completions were lost (not an ordering result)");
    } else if (total_stale > 0) {
      std::printf(
          "[CAUGHT] fence mutation: %llu stale reads after a completion: the fence is needed and the test sees it\n",
          static_cast<unsigned long long>(total_stale));
    } else {
      std::printf(
          "[NOT CAUGHT] fence mutation: no stale read on this machine; the fence is still checked in the "
          "machine code (ctest emunic_gpu_mover_fence_sass)\n");
      g_mutation_missed = true;
    }
  }
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
    if (a == "--case")
      o.only = next();
    else if (a == "--device")
      o.device = std::stoi(next());
    else if (a == "--sms")
      o.sms = std::stoi(next());
    else if (a == "--fence-rounds")
      o.fence_rounds = std::stoi(next());
    else if (a == "--no-fence")
      o.fence = false;
    else if (a == "--no-preload")
      o.preload = false;
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of test_gpu_mover.cu)\n", a.c_str());
      return 2;
    }
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || (e == cudaSuccess && count == 0)) {
    std::printf("command: %s\n", cmd.c_str());
    case_refusals(false, o);
    if (g_failed) return 1;
    std::printf("SKIP: no GPU (%s): the GPU cases did not run\n", cudaGetErrorString(e));
    return 77;
  }
  CK(e);
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, o.device));
  int drv = 0, rt = 0;
  CK(cudaDriverGetVersion(&drv));
  CK(cudaRuntimeGetVersion(&rt));
  std::printf(
      "command: %s\nGPU %d: %s, %d SMs; %d GPU(s); driver %d, runtime %d; engine SMs %d, fence %s, preload %s\n",
      cmd.c_str(), o.device, prop.name, prop.multiProcessorCount, count, drv, rt, o.sms, o.fence ? "on" : "OFF",
      o.preload ? "on" : "OFF");
  std::fflush(stdout);
  const std::vector<std::pair<std::string, void (*)(const Options&)>> cases = {
      {"coresident", case_coresident},  // first: the engine's module must not be loaded by an earlier case
      {"copy", case_copy},
      {"sync", case_sync},
      {"race", case_race},
      {"capture", case_capture},
      {"fence", case_fence},
  };
  bool any = false;
  for (const auto& [name, fn] : cases) {
    if (!o.only.empty() && o.only != name) continue;
    if (!o.fence && name != "fence" && o.only.empty()) continue;  // the mutation runs only the case it is for
    if (!o.preload && name != "coresident" && o.only.empty()) continue;
    any = true;
    try {
      fn(o);
    } catch (const std::exception& ex) {
      report(name.c_str(), false, std::string("exception: ") + ex.what());
    }
  }
  if ((o.only.empty() && o.fence && o.preload) || o.only == "refusals") {
    any = true;
    case_refusals(true, o);
  }
  if (!any) {
    std::fprintf(stderr, "no case named %s\n", o.only.c_str());
    return 2;
  }
  if (g_failed) {
    std::printf("%d case(s) FAILED\n", g_failed);
    return 1;
  }
  if (g_mutation_missed) return 3;
  std::printf("all cases passed\n");
  return 0;
}
