// anyep/src/kernels/ll/timeline.cu — the host side of the LL timeline (ll/timeline.h): collects the
// stamps of each call and prints the medians at exit. Compiled to nothing unless ANYEP_LL_TIMELINE.
#include "kernels/ll/kernels.h"
#include "kernels/ll/timeline.h"

#if ANYEP_LL_TIMELINE
#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace anyep::ll::timeline {
namespace {

constexpr int kSkipCalls = 20;  // warm-up calls left out of the medians
// Per call, per point: the earliest, median and latest block (us after the earliest start), and
// how many blocks reached it.
using CallRow = std::array<double, kMarks * 4>;

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

struct Record {
  std::mutex mu;
  unsigned long long* stamps = nullptr;  // device [kMaxBlocks][kMarks]
  std::map<std::string, std::vector<CallRow>> calls;

  ~Record() {
    for (auto& [key, rows] : calls) {
      if (rows.size() <= kSkipCalls) continue;
      std::fprintf(stderr, "anyep LL timeline: %s, median of %zu calls (us after the first block's start)\n",
                   key.c_str(), rows.size() - kSkipCalls);
      std::fprintf(stderr, "  %-6s %8s %8s %8s %7s\n", "point", "first", "median", "last", "blocks");
      for (int m = 0; m < kMarks; ++m) {
        std::array<std::vector<double>, 4> col;
        for (size_t i = kSkipCalls; i < rows.size(); ++i)
          for (int q = 0; q < 4; ++q) col[q].push_back(rows[i][m * 4 + q]);
        const double blocks = median_of(col[3]);
        if (blocks == 0.0) continue;
        std::fprintf(stderr, "  %-6d %8.2f %8.2f %8.2f %7.0f\n", m, median_of(col[0]), median_of(col[1]),
                     median_of(col[2]), blocks);
      }
    }
  }
};
Record& record() {
  static Record r;
  return r;
}

}  // namespace

unsigned long long* begin(cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone)
    return nullptr;
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  constexpr size_t bytes = sizeof(unsigned long long) * kMaxBlocks * kMarks;
  if (r.stamps == nullptr && cudaMalloc(&r.stamps, bytes) != cudaSuccess) return nullptr;
  return cudaMemsetAsync(r.stamps, 0, bytes, stream) == cudaSuccess ? r.stamps : nullptr;
}

void end(const char* kernel, int phases, int blocks, cudaStream_t stream) {
  Record& r = record();
  std::vector<unsigned long long> host(static_cast<size_t>(blocks) * kMarks);
  if (cudaStreamSynchronize(stream) != cudaSuccess ||
      cudaMemcpy(host.data(), r.stamps, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost) != cudaSuccess)
    return;
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < blocks; ++b)
    if (host[b * kMarks] != 0) t0 = std::min(t0, host[b * kMarks]);
  CallRow row{};
  for (int m = 0; m < kMarks; ++m) {
    std::vector<double> at;
    for (int b = 0; b < blocks; ++b)
      if (host[b * kMarks + m] != 0) at.push_back(static_cast<double>(host[b * kMarks + m] - t0) / 1e3);
    if (at.empty()) continue;
    std::sort(at.begin(), at.end());
    row[m * 4] = at.front();
    row[m * 4 + 1] = at[at.size() / 2];
    row[m * 4 + 2] = at.back();
    row[m * 4 + 3] = static_cast<double>(at.size());
  }
  const char* names[] = {"", "send", "recv", "send+recv"};
  std::lock_guard<std::mutex> lock(r.mu);
  r.calls[std::string(kernel) + " " + names[phases & 3]].push_back(row);
}

}  // namespace anyep::ll::timeline
#endif
