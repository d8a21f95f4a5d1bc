// One rank (it is its own only peer): dispatch (BF16, FP8 with float scales) and combine through
// LowLatencyBuffer and the real kernels, checked against a host reference; several rounds on one
// buffer (both halves, counters back at zero, a change of shape between calls), filling the kernel
// arguments by hand or through the runtime API (runtime/ll/api.h: descriptors and a stream).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "../gpu_count.h"
#include "common/error.h"
#include "common/gpu_runtime.h"
#include "kernels/ll/logfmt.h"
#include "runtime/ll/api.h"
#include "runtime/ll/buffer.h"

namespace anyep {
namespace {

using runtime::LLShape;
using runtime::LowLatencyBuffer;

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
// e4m3 (bias 7, no infinities, 0x7f/0xff NaN) to float.
float from_e4m3(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

// Device buffer poisoned with 0xff, freed at scope exit.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, bytes) == cudaSuccess) cudaMemset(p, 0xff, bytes);
  }
  ~DevBuf() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

struct Shape {
  int T, H, K, E, N;
};

// Descriptor of a device buffer holding a row-major tensor (its allocation: `alloc_bytes`).
runtime::TensorRef dev_ref(const DevBuf& b, runtime::DType dt, std::initializer_list<int64_t> shape,
                           size_t alloc_bytes) {
  runtime::TensorRef t = runtime::contiguous_ref(b.p, dt, shape, 0);
  t.storage_bytes = static_cast<int64_t>(alloc_bytes);
  return t;
}

// The LogFMT combine output against two host references: the exact sum (every value within the
// format's error bound, kernels/ll/logfmt.h: a factor 2^(step/2) with step <= 32/510, plus the BF16 rounding
// of the output) and the sum of the host's LogFMT round trip of each row (kernels/ll/logfmt.h on the
// CPU, which differs from the GPU's only by its log2/exp2): the output must follow the LogFMT
// levels (much closer to the second), which shows the rows really travelled encoded.
void check_logfmt_combine(const Shape& s, const std::vector<uint16_t>& x, const std::vector<int64_t>& idx,
                          const std::vector<float>& w, const std::vector<uint16_t>& out, bool self_masked) {
  const int H = s.H, K = s.K, N = s.N;
  const float max_rel = std::exp2(ll::logfmt::kLogRange / ll::logfmt::kSteps / 2) - 1.0f;
  double sq_exact = 0, sq_emul = 0;
  int encoded = 0, groups = 0;
  std::vector<float> emul(H), bound(H), exact(H);
  for (int t = 0; t < N; ++t) {
    std::fill(emul.begin(), emul.end(), 0.0f);
    std::fill(bound.begin(), bound.end(), 0.0f);
    std::fill(exact.begin(), exact.end(), 0.0f);
    for (int k = 0; k < K; ++k) {
      const int64_t e = idx[t * K + k];
      if (e < 0 || self_masked) continue;
      std::vector<uint16_t> y(H);
      for (int h = 0; h < H; ++h) y[h] = to_bf16(from_bf16(x[size_t(t) * H + h]) * (1.0f + e / 8.0f));
      for (int g0 = 0; g0 < H; g0 += ll::logfmt::kGroup) {
        uint8_t enc[ll::logfmt::kEncodedBytes];
        uint32_t meta = 0;
        float dec[ll::logfmt::kGroup];
        const bool coded = ll::logfmt::encode_group(&y[g0], enc, &meta);
        if (coded) ll::logfmt::decode_group(enc, meta, dec);
        encoded += coded;
        ++groups;
        for (int i = 0; i < ll::logfmt::kGroup; ++i) {
          const float v = from_bf16(y[g0 + i]);
          exact[g0 + i] += w[t * K + k] * v;
          emul[g0 + i] += w[t * K + k] * (coded ? dec[i] : v);
          bound[g0 + i] += w[t * K + k] * std::fabs(v) * (coded ? max_rel * 1.01f : 0.0f);
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const float got = from_bf16(out[size_t(t) * H + h]);
      ASSERT_LE(std::fabs(got - exact[h]), bound[h] + std::fabs(exact[h]) * 0.0079f + 1e-6f)
          << "token " << t << " h " << h << ": outside the LogFMT bound of the exact sum " << exact[h];
      // Both references rounded to BF16 as the output is (what is left against the host's LogFMT:
      // a level its log2 placed otherwise; against the exact sum: the LogFMT rounding).
      const float ex = from_bf16(to_bf16(exact[h])), em = from_bf16(to_bf16(emul[h]));
      sq_exact += double(got - ex) * (got - ex);
      sq_emul += double(got - em) * (got - em);
    }
  }
  if (self_masked) return;
  // On the H100 this data encoded 243 of 640 groups (the rest exceed the log range and travel as
  // BF16): enough of both kinds to test each.
  ASSERT_GT(encoded, groups / 4) << "the test data should encode a good share of the groups";
  EXPECT_LT(sq_emul, 0.1 * sq_exact) << "the output does not follow the LogFMT levels (" << encoded << " of " << groups
                                     << " groups encoded)";
}

// One dispatch + combine round on `buf` (one rank: L = E, R*T = T) with fresh random routing.
// via_api: through runtime::dispatch / runtime::combine (staged combine); else the kernel
// arguments by hand from the layout's handle offsets. self_masked: the rank is masked in its own
// shrink-mode buffer, so nothing is sent or received and the combine is all zeros. logfmt: the
// combine sends LogFMT rows; x is then small (|x| < 0.5), so that most groups encode.
void round_trip(LowLatencyBuffer& buf, const Shape& s, ll::Format fmt, unsigned seed, bool via_api = false,
                bool self_masked = false, bool logfmt = false) {
  const int T = s.T, H = s.H, K = s.K, E = s.E, N = s.N, L = E, RT = T, G = H / 128;
  const LLShape shape{T, H, E};
  const ll::Layout g{T, H, 1, E};
  const size_t handle_bytes = static_cast<size_t>(g.handle_ints()) * 4;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(logfmt ? -0.5f : -2.f, logfmt ? 0.5f : 2.f);
  std::vector<uint16_t> x(size_t(N) * H);
  for (auto& v : x) v = to_bf16(uni(rng));
  std::vector<int64_t> idx(size_t(N) * K);
  std::vector<float> w(size_t(N) * K);
  for (int t = 0; t < N; ++t) {
    std::vector<int> e(E);
    for (int i = 0; i < E; ++i) e[i] = i;
    std::shuffle(e.begin(), e.end(), rng);
    for (int k = 0; k < K; ++k) {
      idx[t * K + k] = (t % 5 == k) ? -1 : e[k];  // some -1 entries
      w[t * K + k] = 0.25f * (k + 1);
    }
  }
  const bool fp8 = fmt != ll::Format::kBF16;
  const size_t row_bytes = fp8 ? H : 2 * H;
  DevBuf d_x(x.size() * 2), d_idx(idx.size() * 8), d_w(w.size() * 4), d_recv(size_t(L) * RT * row_bytes),
      d_scales(size_t(L) * G * RT * 4), d_count(L * 4), d_info(handle_bytes), d_range(size_t(L) * 8),
      d_out(size_t(N) * H * 2), d_y(size_t(L) * RT * H * 2);
  for (const DevBuf* b : {&d_x, &d_idx, &d_w, &d_recv, &d_scales, &d_count, &d_info, &d_range, &d_out, &d_y})
    ASSERT_NE(b->p, nullptr) << "cudaMalloc failed";
  CK(cudaMemcpy(d_x.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_idx.p, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_w.p, w.data(), w.size() * 4, cudaMemcpyHostToDevice));

  using runtime::DType;
  const runtime::TensorRef x_ref = dev_ref(d_x, DType::kBFloat16, {N, H}, x.size() * 2),
                           idx_ref = dev_ref(d_idx, DType::kInt64, {N, K}, idx.size() * 8),
                           info_ref = dev_ref(d_info, DType::kInt32, {L, RT}, handle_bytes),
                           range_ref = dev_ref(d_range, DType::kInt64, {L, 1}, size_t(L) * 8);
  if (via_api) {
    runtime::LLDispatchIn in;
    in.x = x_ref;
    in.topk_idx = idx_ref;
    in.max_tokens = T;
    in.num_experts = E;
    in.use_fp8 = fp8;
    runtime::LLDispatchOut out;
    out.recv_x =
        dev_ref(d_recv, fp8 ? DType::kFloat8_e4m3fn : DType::kBFloat16, {L, RT, H}, size_t(L) * RT * row_bytes);
    if (fp8) {  // column-major scales: storage [L, G, R*T]
      out.recv_scales = dev_ref(d_scales, DType::kFloat32, {L, RT, G}, size_t(L) * G * RT * 4);
      out.recv_scales.strides[0] = int64_t(G) * RT;
      out.recv_scales.strides[1] = 1;
      out.recv_scales.strides[2] = RT;
    }
    out.recv_count = dev_ref(d_count, DType::kInt32, {L}, size_t(L) * 4);
    out.src_info = info_ref;
    out.layout_range = range_ref;
    runtime::dispatch(buf, in, out, ll::kPhaseBoth, nullptr);
  } else {
    ll::DispatchArgs d;
    d.c = buf.next_dispatch_common(shape, N, K);
    d.x = d_x.p;
    d.topk_idx = d_idx.as<int64_t>();
    d.fmt = fmt;
    d.recv_x = d_recv.p;
    d.recv_scales = fp8 ? d_scales.p : nullptr;
    d.recv_count = d_count.as<int32_t>();
    d.src_info = d_info.as<int32_t>() + g.handle_src_info_off();
    d.src_topk = d_info.as<int32_t>() + g.handle_src_topk_off();
    d.handle_half = d_info.as<int32_t>() + g.handle_half_off();
    d.layout_range = d_range.as<int64_t>();
    buf.launch(d, ll::kPhaseBoth, nullptr);
  }
  CK(cudaDeviceSynchronize());
  buf.check_error();

  std::vector<uint8_t> recv(size_t(L) * RT * row_bytes);
  std::vector<float> scales(size_t(L) * G * RT);
  std::vector<int32_t> count(L), info(static_cast<size_t>(g.handle_ints()));
  std::vector<int64_t> range(L);
  CK(cudaMemcpy(recv.data(), d_recv.p, recv.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(scales.data(), d_scales.p, scales.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(count.data(), d_count.p, L * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(info.data(), d_info.p, info.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(range.data(), d_range.p, L * 8, cudaMemcpyDeviceToHost));
  for (int e = 0; e < E; ++e) {
    std::set<int> want;
    for (int t = 0; t < N; ++t)
      for (int k = 0; k < K; ++k)
        if (idx[t * K + k] == e && !self_masked) want.insert(t);
    ASSERT_EQ(count[e], static_cast<int>(want.size())) << "expert " << e << " seed " << seed;
    ASSERT_EQ(range[e], static_cast<int64_t>(want.size())) << "one source rank: begin 0, count in low bits";
    std::set<int> got;
    for (int row = 0; row < count[e]; ++row) {
      const int t = info[g.handle_src_info_off() + size_t(e) * RT + row],
                k = info[g.handle_src_topk_off() + size_t(e) * RT + row];
      ASSERT_TRUE(t >= 0 && t < N && k >= 0 && k < K)
          << "expert " << e << " row " << row << ": token " << t << " k " << k;
      got.insert(t);
      ASSERT_EQ(idx[t * K + k], e) << "top-k slot of expert " << e << " row " << row;
      const uint8_t* r = &recv[(size_t(e) * RT + row) * row_bytes];
      if (!fp8) {
        ASSERT_EQ(0, std::memcmp(r, &x[size_t(t) * H], H * 2)) << "payload of token " << t << " at expert " << e;
        continue;
      }
      for (int gi = 0; gi < G; ++gi) {
        float amax = 0;
        for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(from_bf16(x[size_t(t) * H + gi * 128 + i])));
        const float want_scale = std::max(amax, 1e-4f) / 448.0f;
        const float sc = scales[(size_t(e) * G + gi) * RT + row];  // [L, G, R*T]
        ASSERT_NEAR(sc, want_scale, 1e-6f * want_scale) << "scale of token " << t << " group " << gi;
        for (int i = 0; i < 128; ++i) {
          const float ref = from_bf16(x[size_t(t) * H + gi * 128 + i]);
          const float deq = from_e4m3(r[gi * 128 + i]) * sc;
          ASSERT_LE(std::fabs(deq - ref), 0.0625f * std::fabs(ref) + sc * 0.0079f)
              << "FP8 value of token " << t << " element " << gi * 128 + i;
        }
      }
    }
    ASSERT_EQ(got, want) << "expert " << e;
  }

  // Combine with expert e scaling by (1 + e/8): out[t] = sum_k w[t,k] * (1 + e_k/8) * x[t].
  std::vector<uint16_t> y(size_t(L) * RT * H, to_bf16(NAN));
  for (int e = 0; e < E; ++e)
    for (int row = 0; row < count[e]; ++row) {
      const int t = info[size_t(e) * RT + row];
      for (int h = 0; h < H; ++h)
        y[(size_t(e) * RT + row) * H + h] = to_bf16(from_bf16(x[size_t(t) * H + h]) * (1.0f + e / 8.0f));
    }
  CK(cudaMemcpy(d_y.p, y.data(), y.size() * 2, cudaMemcpyHostToDevice));
  if (via_api) {
    runtime::LLCombineIn in;
    in.x = dev_ref(d_y, DType::kBFloat16, {L, RT, H}, y.size() * 2);
    in.topk_idx = idx_ref;
    in.topk_weights = dev_ref(d_w, DType::kFloat32, {N, K}, w.size() * 4);
    in.src_info = info_ref;
    in.layout_range = range_ref;
    in.max_tokens = T;
    in.num_experts = E;
    in.use_logfmt = logfmt;
    const runtime::LLCall call =
        runtime::combine(buf, in, dev_ref(d_out, DType::kBFloat16, {N, H}, size_t(N) * H * 2), ll::kPhaseSend, nullptr);
    call.launch(ll::kPhaseRecv, nullptr);  // staged: send, then receive
  } else {
    ll::CombineArgs c;
    c.c = buf.next_combine_common(shape, N, K);
    c.x = d_y.p;
    c.src_info = d_info.as<int32_t>() + g.handle_src_info_off();
    c.src_topk = d_info.as<int32_t>() + g.handle_src_topk_off();
    c.handle_half = d_info.as<int32_t>() + g.handle_half_off();
    c.layout_range = d_range.as<int64_t>();
    c.topk_idx = d_idx.as<int64_t>();
    c.topk_weights = d_w.as<float>();
    c.out = d_out.p;
    c.logfmt = logfmt;
    buf.launch(c, ll::kPhaseSend, nullptr);  // staged: send, then receive
    buf.launch(c, ll::kPhaseRecv, nullptr);
  }
  CK(cudaDeviceSynchronize());
  buf.check_error();
  std::vector<uint16_t> out(size_t(N) * H);
  CK(cudaMemcpy(out.data(), d_out.p, out.size() * 2, cudaMemcpyDeviceToHost));
  if (logfmt) {
    ASSERT_NO_FATAL_FAILURE(check_logfmt_combine(s, x, idx, w, out, self_masked));
    return;
  }
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) {
      float ref = 0;
      for (int k = 0; k < K; ++k) {
        const int64_t e = idx[t * K + k];
        if (e >= 0 && !self_masked)
          ref += w[t * K + k] * from_bf16(to_bf16(from_bf16(x[size_t(t) * H + h]) * (1.0f + e / 8.0f)));
      }
      ASSERT_NEAR(from_bf16(out[size_t(t) * H + h]), ref, 1e-2f * std::fabs(ref) + 1e-3f)
          << "token " << t << " h " << h;
    }
}

// A connected one-rank buffer large enough for every shape of `shapes`.
std::unique_ptr<LowLatencyBuffer> one_rank_buffer(std::initializer_list<Shape> shapes) {
  int64_t bytes = 0;
  for (const Shape& s : shapes) bytes = std::max(bytes, LowLatencyBuffer::size_hint(s.T, s.H, 1, s.E));
  auto buf = std::make_unique<LowLatencyBuffer>(0, 1, bytes);
  buf->connect({buf->local_info()});
  return buf;
}

TEST(LLSingleRank, DispatchCombineRounds) {
  ANYEP_REQUIRE_GPUS(1);
  const Shape small{32, 512, 4, 8, 30}, other{16, 1024, 6, 24, 16};
  const auto owned = one_rank_buffer({small, other});
  LowLatencyBuffer& buf = *owned;
  // Both buffer halves, both formats, and a change of shape (expert count, hidden, tokens).
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kBF16, 1));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kFP8, 2));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, other, ll::Format::kBF16, 3));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, other, ll::Format::kFP8, 4));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kBF16, 5));
}

// LogFMT combine (use_logfmt): by hand and through the API, both halves, a change of shape (E=24:
// some groups reach |y| >= 1 and stay BF16 next to encoded ones).
TEST(LLSingleRank, LogfmtCombineRounds) {
  ANYEP_REQUIRE_GPUS(1);
  const Shape small{32, 512, 4, 8, 30}, other{16, 1024, 6, 24, 16};
  const auto owned = one_rank_buffer({small, other});
  LowLatencyBuffer& buf = *owned;
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kBF16, 31, false, false, true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kFP8, 32, true, false, true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, other, ll::Format::kBF16, 33, true, false, true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kBF16, 34, false));  // BF16 after LogFMT
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, other, ll::Format::kBF16, 35, false, false, true));
}

TEST(LLSingleRank, RuntimeApiRounds) {
  ANYEP_REQUIRE_GPUS(1);
  const Shape small{32, 512, 4, 8, 30}, other{16, 1024, 6, 24, 16};
  const auto owned = one_rank_buffer({small, other});
  LowLatencyBuffer& buf = *owned;
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kFP8, 11, true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, other, ll::Format::kBF16, 12, true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kBF16, 13, false));  // the two ways mix
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, small, ll::Format::kBF16, 14, true));
}

// The one check that needs the device: topk_idx values, copied to the host on the call's stream
// (opt-in: ANYEP_LL_CHECK_INPUTS=1, read when the buffer is built).
TEST(LLSingleRank, RuntimeApiChecksTopkValues) {
  ANYEP_REQUIRE_GPUS(1);
  const int T = 8, H = 256, E = 4, K = 2;
  setenv("ANYEP_LL_CHECK_INPUTS", "1", 1);
  LowLatencyBuffer buf(0, 1, LowLatencyBuffer::size_hint(T, H, 1, E));
  unsetenv("ANYEP_LL_CHECK_INPUTS");
  ASSERT_TRUE(buf.check_inputs());
  buf.connect({buf.local_info()});
  const std::vector<int64_t> idx{0, 1, 2, E};  // E: out of range
  DevBuf d_x(size_t(2) * H * 2), d_idx(idx.size() * 8);
  CK(cudaMemcpy(d_idx.p, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
  runtime::LLDispatchIn in;
  in.x = runtime::contiguous_ref(d_x.p, runtime::DType::kBFloat16, {2, H}, 0);
  in.topk_idx = runtime::contiguous_ref(d_idx.p, runtime::DType::kInt64, {2, K}, 0);
  in.max_tokens = T;
  in.num_experts = E;
  in.use_fp8 = false;
  const runtime::LLDispatchPlan p = runtime::dispatch_outputs(buf, in);
  std::vector<std::unique_ptr<DevBuf>> keep;
  const auto alloc = [&](const runtime::OutputSpec& s) {
    keep.push_back(std::make_unique<DevBuf>(size_t(s.storage_elems) * runtime::dtype_bytes(s.dtype)));
    runtime::TensorRef t = runtime::contiguous_ref(keep.back()->p, s.dtype, {}, 0);
    t.ndim = s.ndim;
    for (int d = 0; d < s.ndim; ++d) {
      t.shape[d] = s.shape[d];
      t.strides[d] = s.strides[d];
    }
    t.storage_bytes = s.storage_elems * runtime::dtype_bytes(s.dtype);
    return t;
  };
  runtime::LLDispatchOut out{alloc(p.recv_x), {}, alloc(p.recv_count), alloc(p.src_info), alloc(p.layout_range)};
  try {
    runtime::dispatch(buf, in, out, ll::kPhaseBoth, nullptr);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("topk_idx holds values in [0, 4]"), std::string::npos) << e.what();
  }
}

// With the host check off (the default) the kernel refuses the expert and the next call names it.
TEST(LLSingleRank, KernelRefusesOutOfRangeExpert) {
  ANYEP_REQUIRE_GPUS(1);
  const int T = 8, H = 256, E = 4;
  LowLatencyBuffer buf(0, 1, LowLatencyBuffer::size_hint(T, H, 1, E));
  ASSERT_FALSE(buf.check_inputs()) << "ANYEP_LL_CHECK_INPUTS is set in this environment";
  buf.connect({buf.local_info()});
  const std::vector<int64_t> idx{0, 1, 2, E};  // token 1, slot 1: out of range
  DevBuf d_x(size_t(2) * H * 2), d_idx(idx.size() * 8), d_recv(size_t(E) * T * H * 2), d_count(E * 4),
      d_info(size_t(ll::Layout{T, H, 1, E}.handle_ints()) * 4), d_range(size_t(E) * 8);
  CK(cudaMemcpy(d_idx.p, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
  const ll::Layout g{T, H, 1, E};
  ll::DispatchArgs d;
  d.c = buf.next_dispatch_common(LLShape{T, H, E}, 2, 2);
  d.x = d_x.p;
  d.topk_idx = d_idx.as<int64_t>();
  d.fmt = ll::Format::kBF16;
  d.recv_x = d_recv.p;
  d.recv_count = d_count.as<int32_t>();
  d.src_info = d_info.as<int32_t>() + g.handle_src_info_off();
  d.src_topk = d_info.as<int32_t>() + g.handle_src_topk_off();
  d.handle_half = d_info.as<int32_t>() + g.handle_half_off();
  d.layout_range = d_range.as<int64_t>();
  buf.launch(d, ll::kPhaseBoth, nullptr);
  CK(cudaDeviceSynchronize());
  try {
    buf.check_error();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("topk_idx holds expert 4 (token 1)"), std::string::npos) << e.what();
  }
}

// Shrink mode at one rank: masking the rank itself empties every call (nothing sent, nothing
// waited for: no timeout), the query reports it, and after clearing the mask a round trip is whole.
TEST(LLSingleRank, MaskedRankIsSkipped) {
  ANYEP_REQUIRE_GPUS(1);
  const Shape s{32, 512, 4, 8, 30};
  LowLatencyBuffer buf(0, 1, LowLatencyBuffer::size_hint(s.T, s.H, 1, s.E), -1, "", /*enable_shrink=*/true);
  buf.connect({buf.local_info()});
  DevBuf d_status(4);
  const runtime::TensorRef status = runtime::contiguous_ref(d_status.p, runtime::DType::kInt32, {1}, 0);
  const auto query = [&] {
    runtime::query_mask(buf, status, nullptr);
    int32_t v = -1;
    EXPECT_EQ(cudaMemcpy(&v, d_status.p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  };
  EXPECT_EQ(query(), 0);
  runtime::update_mask(buf, 0, true, nullptr);
  EXPECT_EQ(query(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, s, ll::Format::kBF16, 21, true, /*self_masked=*/true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, s, ll::Format::kFP8, 22, false, /*self_masked=*/true));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "a masked rank was waited for";
  EXPECT_EQ(query(), 1);
  runtime::update_mask(buf, 0, false, nullptr);
  EXPECT_EQ(query(), 0);
  runtime::update_mask(buf, 0, true, nullptr);
  runtime::clean_mask(buf, nullptr);
  EXPECT_EQ(query(), 0);
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, s, ll::Format::kBF16, 23, true));
  ASSERT_NO_FATAL_FAILURE(round_trip(buf, s, ll::Format::kFP8, 24, false));
  EXPECT_THROW(runtime::update_mask(buf, 1, true, nullptr), InvalidArgument);  // rank out of range
  // Without shrink mode the mask calls are refused.
  LowLatencyBuffer plain(0, 1, LowLatencyBuffer::size_hint(s.T, s.H, 1, s.E));
  EXPECT_THROW(runtime::update_mask(plain, 0, true, nullptr), InvalidArgument);
  EXPECT_THROW(runtime::query_mask(plain, status, nullptr), InvalidArgument);
  EXPECT_THROW(runtime::clean_mask(plain, nullptr), InvalidArgument);
}

TEST(LLSingleRank, ShapeErrorsNameTheProblem) {
  ANYEP_REQUIRE_GPUS(1);
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
