// GPU producers, host consumers, no network: W warps push into R rings read by T host threads.
// Skips (with the reason) where no CUDA GPU is visible; CI compiles it, the device machine runs it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../gpu_count.h"
#include "channel/channel.h"
#include "push_kernels.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::gputest;

namespace {

#define CUDA_OK(x)                                                      \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #x << ": " << cudaGetErrorString(e_); \
  } while (0)

// Skips (saying why) only without a GPU; an unexpected CUDA error fails (tests/gpu/gpu_count.h).
#define SKIP_WITHOUT_GPU() ANYEP_REQUIRE_GPUS(1)

// Checks everything ring `r` delivers against the producers' schedule (see push_kernels.h):
// each producer's commands arrive in push order, each exactly once, none torn.
class RingChecker {
 public:
  RingChecker(uint32_t ring, uint32_t num_rings, uint32_t producers, uint32_t lanes_per_warp, uint32_t per_lane,
              int spread)
      : ring_(ring), rings_(num_rings), next_(producers, 0) {
    for (uint32_t p = 0; p < producers; ++p) {
      if (p % port::kWarpSize >= lanes_per_warp) {
        next_[p] = per_lane;
        continue;
      }  // not a producing lane
      next_[p] = 0;
      while (next_[p] < rings_ && ring_of(p, next_[p], rings_, spread) != ring) ++next_[p];  // first j for us
      for (uint32_t j = next_[p]; j < per_lane; j += rings_) ++expected_;
    }
  }
  // Returns an empty string if `c` is the next command expected, else what was wrong.
  std::string check(const TransferCmd& c, uint64_t index) {
    const uint32_t p = static_cast<uint32_t>(cmd_dst_offset(c) / cmd::kOffsetAlign);
    const uint32_t j = static_cast<uint32_t>(cmd_src_offset(c) / cmd::kOffsetAlign);
    const std::string where = "ring " + std::to_string(ring_) + " index " + std::to_string(index) + ": ";
    if (p >= next_.size()) return where + "producer " + std::to_string(p) + " out of range (torn or stray slot)";
    const TransferCmd want = expected_cmd(p, j, ring_);
    if (c.lo != want.lo || c.hi != want.hi)
      return where + "command from producer " + std::to_string(p) + " #" + std::to_string(j) +
             " has inconsistent fields (torn slot?) or belongs to another ring";
    if (j != next_[p])
      return where + "producer " + std::to_string(p) + " sent #" + std::to_string(j) + ", expected #" +
             std::to_string(next_[p]) + (j < next_[p] ? " (duplicate or reordered)" : " (one lost)");
    next_[p] += rings_;
    ++received_;
    return {};
  }
  uint64_t expected() const { return expected_; }
  uint64_t received() const { return received_; }

 private:
  uint32_t ring_, rings_;
  std::vector<uint32_t> next_;
  uint64_t expected_ = 0, received_ = 0;
};

struct RunResult {
  std::vector<std::string> errors;
  uint64_t received = 0, expected = 0;
};

// T host threads drain the rings (thread t owns rings t, t+T, ...) until every expected command
// arrived or `timeout` passed.
RunResult consume(Channel& ch, uint32_t threads, uint32_t producers, uint32_t lanes_per_warp, uint32_t per_lane,
                  int spread, std::chrono::seconds timeout) {
  const uint32_t R = ch.num_rings();
  std::vector<RingChecker> checkers;
  for (uint32_t r = 0; r < R; ++r) checkers.emplace_back(r, R, producers, lanes_per_warp, per_lane, spread);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      TransferCmd batch[64];
      for (;;) {
        bool all_done = true, any = false;
        for (uint32_t r = t; r < R; r += threads) {
          RingChecker& chk = checkers[r];
          if (chk.received() >= chk.expected()) continue;
          all_done = false;
          RingConsumer& c = ch.consumer(r);
          const uint32_t n = c.poll_batch(batch, 64);
          for (uint32_t k = 0; k < n; ++k) {
            std::string e = chk.check(batch[k], c.tail() + k);
            if (!e.empty() && errors[t].empty()) errors[t] = e;
          }
          c.pop(n);
          any |= n > 0;
        }
        if (all_done || !errors[t].empty()) return;
        if (!any && std::chrono::steady_clock::now() > deadline) {
          errors[t] = "consumer thread " + std::to_string(t) + " timed out";
          for (uint32_t r = t; r < R; r += threads)
            errors[t] += "; ring " + std::to_string(r) + " got " + std::to_string(checkers[r].received()) + "/" +
                         std::to_string(checkers[r].expected());
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  RunResult res;
  for (auto& e : errors)
    if (!e.empty()) res.errors.push_back(e);
  for (auto& c : checkers) res.received += c.received(), res.expected += c.expected();
  return res;
}

struct Shape {
  uint32_t warps, rings, threads, per_lane, capacity;
  int warp_push;
  int spread_lanes = 0;
};

void run_shape(const Shape& s) {
  Channel ch(
      {.num_rings = s.rings, .capacity = s.capacity, .producer = ProducerKind::kGpu, .timeout_ns = 20'000'000'000});
  uint32_t* failures = nullptr;
  CUDA_OK(cudaMalloc(&failures, sizeof(uint32_t)));
  CUDA_OK(cudaMemset(failures, 0, sizeof(uint32_t)));
  PushParams p{ch.producer_array(), s.rings,        s.per_lane, port::kWarpSize,
               s.warp_push,         s.spread_lanes, nullptr,    failures};
  ASSERT_EQ(s.warps % 4, 0u);
  CUDA_OK(launch_push(p, s.warps, 4, nullptr));
  RunResult res = consume(ch, s.threads, s.warps * port::kWarpSize, port::kWarpSize, s.per_lane, s.spread_lanes,
                          std::chrono::seconds(30));
  CUDA_OK(cudaDeviceSynchronize());
  uint32_t failed = 0;
  CUDA_OK(cudaMemcpy(&failed, failures, sizeof failed, cudaMemcpyDeviceToHost));
  cudaFree(failures);
  for (auto& e : res.errors) ADD_FAILURE() << e;
  EXPECT_EQ(failed, 0u) << "pushes timed out";
  EXPECT_EQ(res.expected, uint64_t{s.warps} * port::kWarpSize * s.per_lane);
  EXPECT_EQ(res.received, res.expected);
  for (uint32_t r = 0; r < s.rings; ++r) {
    TransferCmd extra;
    EXPECT_FALSE(ch.consumer(r).poll(&extra)) << "ring " << r << " holds a command nobody accounted for";
  }
  EXPECT_NO_THROW(ch.check_errors());
}

}  // namespace

// W = 64 warps (2048 producer lanes) x 192 commands into R = 8 rings read by T = 4 threads; a
// producer's j-th command goes to ring (warp + j) % R, so every producer feeds every ring.
TEST(ChannelGpu, WarpsToRingsToHostThreadsPerLanePush) {
  SKIP_WITHOUT_GPU();
  run_shape({.warps = 64, .rings = 8, .threads = 4, .per_lane = 192, .capacity = 1024, .warp_push = 0});
}

TEST(ChannelGpu, WarpsToRingsToHostThreadsWarpPush) {
  SKIP_WITHOUT_GPU();
  run_shape({.warps = 64, .rings = 8, .threads = 4, .per_lane = 192, .capacity = 1024, .warp_push = 1});
}

// Lanes of one warp push into different rings in the same push_warp call: one claim per ring.
TEST(ChannelGpu, WarpPushWithLanesOnDifferentRings) {
  SKIP_WITHOUT_GPU();
  run_shape(
      {.warps = 32, .rings = 6, .threads = 3, .per_lane = 96, .capacity = 128, .warp_push = 1, .spread_lanes = 1});
}

TEST(ChannelGpu, MoreRingsThanThreadsAndOneThread) {
  SKIP_WITHOUT_GPU();
  run_shape({.warps = 32, .rings = 5, .threads = 1, .per_lane = 64, .capacity = 256, .warp_push = 1});
  run_shape({.warps = 32, .rings = 16, .threads = 8, .per_lane = 64, .capacity = 64, .warp_push = 0});
}

// A ring of 4 slots and 128 producer lanes: exactly 4 pushes complete while nobody consumes, the
// rest wait (bounded); once a host thread consumes, every command still arrives once, in order.
TEST(ChannelGpu, TinyRingBackpressure) {
  SKIP_WITHOUT_GPU();
  for (int warp_push : {0, 1}) {
    SCOPED_TRACE(warp_push ? "push_warp" : "push");
    constexpr uint32_t kWarps = 4, kCap = 4, kPerLane = 48;
    Channel ch({.num_rings = 1, .capacity = kCap, .producer = ProducerKind::kGpu, .timeout_ns = 20'000'000'000});
    uint32_t *progress = nullptr, *progress_dev = nullptr, *failures = nullptr;
    CUDA_OK(cudaHostAlloc(&progress, kWarps * port::kWarpSize * sizeof(uint32_t), cudaHostAllocMapped));
    std::fill(progress, progress + kWarps * port::kWarpSize, 0u);
    CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&progress_dev), progress, 0));
    CUDA_OK(cudaMalloc(&failures, sizeof(uint32_t)));
    CUDA_OK(cudaMemset(failures, 0, sizeof(uint32_t)));
    PushParams p{ch.producer_array(), 1, kPerLane, port::kWarpSize, warp_push, 0, progress_dev, failures};
    CUDA_OK(launch_push(p, kWarps, 4, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    uint64_t pushed = 0;
    for (uint32_t i = 0; i < kWarps * port::kWarpSize; ++i) pushed += __atomic_load_n(&progress[i], __ATOMIC_ACQUIRE);
    EXPECT_EQ(pushed, kCap) << "with nobody consuming, exactly `capacity` pushes may complete";
    TransferCmd batch[8];
    EXPECT_EQ(ch.consumer(0).poll_batch(batch, 8), kCap);
    EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady) << "kernel finished although the ring was full";
    RunResult res = consume(ch, 1, kWarps * port::kWarpSize, port::kWarpSize, kPerLane, 0, std::chrono::seconds(30));
    CUDA_OK(cudaDeviceSynchronize());
    uint32_t failed = 0;
    CUDA_OK(cudaMemcpy(&failed, failures, sizeof failed, cudaMemcpyDeviceToHost));
    for (auto& e : res.errors) ADD_FAILURE() << e;
    EXPECT_EQ(failed, 0u);
    EXPECT_EQ(res.received, uint64_t{kWarps} * port::kWarpSize * kPerLane);
    pushed = 0;
    for (uint32_t i = 0; i < kWarps * port::kWarpSize; ++i) pushed += progress[i];
    EXPECT_EQ(pushed, uint64_t{kWarps} * port::kWarpSize * kPerLane);
    EXPECT_NO_THROW(ch.check_errors());
    cudaFree(failures);
    cudaFreeHost(progress);
  }
}

// A producer that cannot get a slot gives up after timeout_ns, and the host learns which ring and
// index it waited on.
TEST(ChannelGpu, DeviceTimeoutReportsRingAndIndex) {
  SKIP_WITHOUT_GPU();
  Channel ch({.num_rings = 2, .capacity = 2, .producer = ProducerKind::kGpu, .timeout_ns = 2'000'000});
  uint32_t* failures = nullptr;
  CUDA_OK(cudaMalloc(&failures, sizeof(uint32_t)));
  CUDA_OK(cudaMemset(failures, 0, sizeof(uint32_t)));
  // Lanes 0..2 of each warp push one command; nobody consumes.
  PushParams p{ch.producer_array(), 2, 1, 3, 0, 0, nullptr, failures};
  CUDA_OK(launch_push(p, 4, 4, nullptr));  // 4 warps: warps 0, 2 -> ring 0; warps 1, 3 -> ring 1
  CUDA_OK(cudaDeviceSynchronize());
  uint32_t failed = 0;
  CUDA_OK(cudaMemcpy(&failed, failures, sizeof failed, cudaMemcpyDeviceToHost));
  cudaFree(failures);
  EXPECT_EQ(failed, 8u) << "12 pushes into 2 rings of 2 slots: 8 must time out";
  try {
    ch.check_errors();
    FAIL() << "check_errors did not throw after device timeouts";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ring 0"), std::string::npos) << m;
    EXPECT_NE(m.find("free slot"), std::string::npos) << m;
    EXPECT_NE(m.find("2 ms"), std::string::npos) << m;
  }
}
