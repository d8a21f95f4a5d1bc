// The warp primitives of common/portability.h on a GPU, for whatever warp size the build has
// (32 lanes with CUDA, 64 with HIP): lane ids, shuffles, reductions, ballot/any/all, the full
// lane mask, warp_sync and warp_active_mask, and the HT kernels' masked forms (warp_ballot(mask,
// pred), warp_sync(mask)), lanes_below and warp_reduce_min, each compared with what port::kWarpSize (the host's
// constant) says they must be. Skips without a GPU.
#include <gtest/gtest.h>

#include "../gpu_count.h"
#include "common/gpu_runtime.h"
#include "common/portability.h"
#include "warp_kernels.h"

namespace {

using namespace anyep;
using gputest::kLanes;
using gputest::kWarps;

#define CUDA_OK(x)                                                      \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #x << ": " << cudaGetErrorString(e_); \
  } while (0)

TEST(WarpGpu, PrimitivesMatchTheWarpSize) {
  ANYEP_REQUIRE_GPUS(1);
  CUDA_OK(cudaSetDevice(0));
  gputest::WarpSeen* d = nullptr;
  CUDA_OK(cudaMalloc(&d, sizeof(gputest::WarpSeen)));
  CUDA_OK(cudaMemset(d, 0, sizeof(gputest::WarpSeen)));
  CUDA_OK(gputest::launch_warp_probe(d, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  gputest::WarpSeen h{};
  CUDA_OK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));

  const int n = port::kWarpSize, last = n - 1;
  uint64_t odd = 0;
  for (int l = 1; l < n; l += 2) odd |= uint64_t{1} << l;
  const uint64_t full = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  for (int t = 0; t < kLanes; ++t) {
    const int lane = t % n;
    SCOPED_TRACE("thread " + std::to_string(t));
    EXPECT_EQ(h.lane[t], lane);
    EXPECT_EQ(h.shuffle_xor[t], lane ^ 1);
    EXPECT_EQ(h.shuffle_last[t], 3 * last);
    EXPECT_EQ(h.reduce_sum[t], n * (n - 1) / 2);
    EXPECT_EQ(h.synced[t], 1000 + t / n);
    if (lane < 5) {
      // Lanes that took the branch; at least this one, none outside it.
      EXPECT_NE(h.active_low[t] & (uint64_t{1} << lane), 0u);
      EXPECT_EQ(h.active_low[t] & ~uint64_t{0x1f}, 0u);
    }
    EXPECT_EQ(h.below[t], lane);
    EXPECT_EQ(h.reduce_min[t], 100.0f - static_cast<float>(last));
    EXPECT_EQ(h.reduce_min4[t], 100.0f - static_cast<float>(lane | 3));
    EXPECT_EQ(h.synced_masked[t], 2000 + t / n);
  }
  for (int w = 0; w < kWarps; ++w) {
    SCOPED_TRACE("warp " + std::to_string(w));
    EXPECT_EQ(h.ballot_odd[w], odd);
    EXPECT_EQ(h.ballot_odd_masked[w], odd);
    EXPECT_EQ(h.full_mask[w], full);
    EXPECT_EQ(h.any_last[w], 1);
    EXPECT_EQ(h.all_below[w], 1);
    EXPECT_EQ(h.all_but_last[w], 0);
  }
}

}  // namespace
