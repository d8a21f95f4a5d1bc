// One rank (it is its own only peer): dispatch BF16 and FP8, combine, through LowLatencyBuffer and
// the real kernels, checked against a host reference. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "common/error.h"
#include "runtime/ll_buffer.h"

namespace anyep {
namespace {

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <typename T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemset(p, 0xff, n * sizeof(T));  // poison
  return static_cast<T*>(p);
}

TEST(LLSingleRank, DispatchCombineRoundTrip) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible";
  const int T = 32, H = 512, K = 4, E = 8, N = 30;
  const LLShape shape{T, H, E};
  LowLatencyBuffer buf(0, 1, LowLatencyBuffer::size_hint(T, H, 1, E));
  buf.connect({buf.local_info()});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-2.f, 2.f);
  std::vector<uint16_t> x(N * H);
  for (auto& v : x) v = to_bf16(uni(rng));
  std::vector<int64_t> idx(N * K);
  std::vector<float> w(N * K);
  for (int t = 0; t < N; ++t) {
    std::vector<int> e(E);
    for (int i = 0; i < E; ++i) e[i] = i;
    std::shuffle(e.begin(), e.end(), rng);
    for (int k = 0; k < K; ++k) {
      idx[t * K + k] = (t % 5 == k) ? -1 : e[k];
      w[t * K + k] = 0.25f * (k + 1);
    }
  }
  auto* d_x = dev_alloc<uint16_t>(x.size());
  auto* d_idx = dev_alloc<int64_t>(idx.size());
  auto* d_w = dev_alloc<float>(w.size());
  CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_idx, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_w, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  const int L = E, RT = T;
  auto* d_recv = dev_alloc<uint16_t>(size_t(L) * RT * H);
  auto* d_count = dev_alloc<int32_t>(L);
  auto* d_info = dev_alloc<int32_t>(2 * size_t(L) * RT);
  auto* d_range = dev_alloc<int64_t>(L);
  auto* d_out = dev_alloc<uint16_t>(size_t(N) * H);

  ll::DispatchArgs d;
  d.c = buf.next_dispatch_common(shape, N, K);
  d.x = d_x;
  d.topk_idx = d_idx;
  d.fmt = ll::Format::kBF16;
  d.recv_x = d_recv;
  d.recv_count = d_count;
  d.src_info = d_info;
  d.src_topk = d_info + L * RT;
  d.layout_range = d_range;
  buf.launch(d, ll::kPhaseBoth, nullptr);
  CK(cudaDeviceSynchronize());
  buf.check_error();

  std::vector<uint16_t> recv(size_t(L) * RT * H);
  std::vector<int32_t> count(L), info(2 * L * RT);
  std::vector<int64_t> range(L);
  CK(cudaMemcpy(recv.data(), d_recv, recv.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(count.data(), d_count, L * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(info.data(), d_info, info.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(range.data(), d_range, L * 8, cudaMemcpyDeviceToHost));
  for (int e = 0; e < E; ++e) {
    std::set<int> want;
    for (int t = 0; t < N; ++t)
      for (int k = 0; k < K; ++k)
        if (idx[t * K + k] == e) want.insert(t);
    ASSERT_EQ(count[e], static_cast<int>(want.size())) << "expert " << e;
    ASSERT_EQ(range[e], static_cast<int64_t>(want.size())) << "one source rank: begin 0, count in low bits";
    std::set<int> got;
    for (int row = 0; row < count[e]; ++row) {
      const int t = info[e * RT + row], k = info[L * RT + e * RT + row];
      got.insert(t);
      ASSERT_EQ(idx[t * K + k], e) << "top-k slot of expert " << e << " row " << row;
      ASSERT_EQ(0, std::memcmp(&recv[(size_t(e) * RT + row) * H], &x[size_t(t) * H], H * 2))
          << "payload of token " << t << " at expert " << e;
    }
    ASSERT_EQ(got, want) << "expert " << e;
  }

  // Combine with the identity expert: out[t] = sum_k w[t,k] * x[t].
  ll::CombineArgs c;
  c.c = buf.next_combine_common(shape, N, K);
  c.x = d_recv;
  c.src_info = d_info;
  c.src_topk = d_info + L * RT;
  c.layout_range = d_range;
  c.topk_idx = d_idx;
  c.topk_weights = d_w;
  c.out = d_out;
  buf.launch(c, ll::kPhaseSend, nullptr);  // staged: send, then receive
  buf.launch(c, ll::kPhaseRecv, nullptr);
  CK(cudaDeviceSynchronize());
  buf.check_error();
  std::vector<uint16_t> out(size_t(N) * H);
  CK(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));
  for (int t = 0; t < N; ++t) {
    float ws = 0;
    for (int k = 0; k < K; ++k)
      if (idx[t * K + k] >= 0) ws += w[t * K + k];
    for (int h = 0; h < H; ++h) {
      const float ref = ws * from_bf16(x[size_t(t) * H + h]);
      ASSERT_NEAR(from_bf16(out[size_t(t) * H + h]), ref, 1e-2f * std::fabs(ref) + 1e-3f) << "token " << t << " h " << h;
    }
  }
  cudaFree(d_x); cudaFree(d_idx); cudaFree(d_w); cudaFree(d_recv); cudaFree(d_count); cudaFree(d_info);
  cudaFree(d_range); cudaFree(d_out);
}

TEST(LLSingleRank, ShapeErrorsNameTheProblem) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU visible";
  LowLatencyBuffer buf(0, 1, LowLatencyBuffer::size_hint(8, 256, 1, 4));
  buf.connect({buf.local_info()});
  try {
    buf.layout_for(LLShape{64, 256, 4});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("buffer too small"), std::string::npos) << e.what();
  }
  EXPECT_THROW(buf.next_dispatch_common(LLShape{8, 256, 4}, 9, 2), InvalidArgument);   // tokens > T
  EXPECT_THROW(buf.next_dispatch_common(LLShape{8, 256, 4}, 8, 17), InvalidArgument);  // top-k > 16
}

}  // namespace
}  // namespace anyep
