// anyep/bench/cuda_ipc/bench_cuda_ipc.cpp — GPU0 -> GPU1 (two processes) through the cuda-ipc
// backend vs a raw copy loop measured in the same run, 64 B .. 16 MiB.
//
//   bench_cuda_ipc [reps] [batch|loop]   (launcher: rank 0 on GPU 0, rank 1 on GPU 1)
//   batch (default): the backend issues the copies queued between two polls with one
//   cudaMemcpyBatchAsync; loop: one cudaMemcpyAsync per copy (CudaIpcConfig::batch_copies).
//
// raw:      rank 0 issues N cudaMemcpyAsync into rank 1's IPC-mapped buffer on one stream, then
//           synchronizes: the copy engine alone, no completion tracking, no immediates.
// write:    N post_write (immediate each) + poll until all N completions; a completion means the
//           copy finished and its immediate was handed to rank 1's inbox, which rank 1 drains.
// w32/poll: up to 32 post_write calls, then one poll (how a proxy drains its ring).
// batch32:  up to 32 writes per post_writes call, then one poll.
// rawB32:   the raw loop through cudaMemcpyBatchAsync, 32 copies per call (what the runtime's
//           batch call costs by itself; "n/a" where the runtime or driver lacks it).
// Figures are the median of `reps` timed repetitions after one warm-up; ratio = backend / raw.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/gpu_runtime.h"
#include "testkit/shm_board.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"
#include "transport/factory.h"

using namespace anyep;
using namespace anyep::transport;

namespace {

constexpr uint64_t kSrcBytes = 16ull << 20;
constexpr uint64_t kDstBytes = 256ull << 20;
constexpr int kVariants = 5;  // raw, write, w32/poll, batch32, rawB32

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
uint64_t iters_for(uint64_t size) { return std::clamp<uint64_t>((2ull << 30) / size, 100, 20000); }
uint64_t dst_offset(uint64_t i, uint64_t size) { return (i % std::max<uint64_t>(1, kDstBytes / size)) * size; }

// Rank 0: posts n writes of `size` and polls until all completed. Per round: up to `batch`
// writes, in one post_writes call (as_batch) or in single post_write calls, then one poll.
void run_backend(Transport& t, uint64_t size, uint64_t n, size_t batch, bool as_batch, double deadline) {
  std::vector<WriteDesc> w(batch);
  uint64_t posted = 0, done = 0;
  Completion cq[256];
  ImmEvent iq[16];
  while (done < n) {
    if (posted < n) {
      size_t k = std::min<uint64_t>(batch, n - posted), sent = 0;
      for (size_t j = 0; j < k; ++j)
        w[j] = {1, 0, 0, 0, dst_offset(posted + j, size), size, true, static_cast<uint32_t>(posted + j), posted + j};
      int rc = 0;
      if (as_batch)
        rc = t.post_writes(w.data(), k, &sent);
      else
        while (sent < k && (rc = t.post_write(w[sent])) == 0) ++sent;
      posted += sent;
      if (rc && rc != -EAGAIN) throw std::runtime_error("post_writes: " + t.last_error());
    }
    size_t nc = 0, ni = 0;
    if (t.poll(cq, 256, &nc, iq, 16, &ni)) throw std::runtime_error("poll: " + t.last_error());
    for (size_t j = 0; j < nc; ++j)
      if (cq[j].status) throw std::runtime_error("completion failed: " + t.last_error());
    done += nc;
    if (now_s() > deadline) throw std::runtime_error("rank 0: writes of " + std::to_string(size) + " B timed out");
  }
}

// Rank 1: drains n immediates.
void drain(Transport& t, uint64_t n, double deadline) {
  uint64_t got = 0;
  Completion cq[16];
  ImmEvent iq[256];
  while (got < n) {
    size_t nc = 0, ni = 0;
    if (t.poll(cq, 16, &nc, iq, 256, &ni)) throw std::runtime_error("poll: " + t.last_error());
    got += ni;
    if (now_s() > deadline)
      throw std::runtime_error("rank 1: immediates timed out (" + std::to_string(got) + "/" + std::to_string(n) + ")");
  }
}

// The raw loop through the runtime's batch call, 32 copies per call; false if it is refused.
bool raw_batch(uint8_t* dst, const uint8_t* src, uint64_t size, uint64_t n, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  void* dsts[32];
  void* srcs[32];
  size_t sizes[32];
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  for (uint64_t i = 0; i < n;) {
    size_t k = 0;
    for (; k < 32 && i < n; ++k, ++i) {
      dsts[k] = dst + dst_offset(i, size);
      srcs[k] = const_cast<uint8_t*>(src);
      sizes[k] = size;
    }
    size_t first = 0;
#if CUDART_VERSION >= 13000
    cudaError_t e = cudaMemcpyBatchAsync(dsts, srcs, sizes, k, &attr, &first, 1, stream);
#else
    size_t fail_idx = 0;
    cudaError_t e = cudaMemcpyBatchAsync(dsts, srcs, sizes, k, &attr, &first, 1, &fail_idx, stream);
#endif
    if (e != cudaSuccess) {
      cudaGetLastError();
      cudaStreamSynchronize(stream);
      return false;
    }
  }
  check(cudaStreamSynchronize(stream), "raw batch sync");
  return true;
#else
  (void)dst, (void)src, (void)size, (void)n, (void)stream;
  return false;
#endif
}

int child(const char* board_name, uint32_t rank, int device, int reps, bool batch_copies) {
  testkit::Board board = testkit::Board::attach(board_name);
  check(cudaSetDevice(device), "cudaSetDevice");
  uint8_t *buf = nullptr, *raw_target = nullptr;
  uint64_t bytes = rank == 0 ? kSrcBytes : kDstBytes;
  check(cudaMalloc(&buf, bytes), "cudaMalloc");
  check(cudaMemset(buf, rank + 1, bytes), "cudaMemset");
  // Rank 1 also exports a second, unregistered buffer of the same size as the raw loop's target,
  // so that the baseline opens its own IPC mapping (not one the backend already holds).
  cudaIpcMemHandle_t raw_handle{};
  if (rank == 1) {
    check(cudaMalloc(&raw_target, kDstBytes), "cudaMalloc");
    check(cudaIpcGetMemHandle(&raw_handle, raw_target), "cudaIpcGetMemHandle");
  }
  check(cudaDeviceSynchronize(), "sync");
  TransportSpec spec = TransportSpec::from_env("cuda-ipc", rank, 2);  // ANYEP_CHAOS_SEED: under chaos
  spec.cuda_ipc.device = device;
  spec.cuda_ipc.batch_copies = batch_copies;
  auto t = make_transport(spec);
  t->register_memory(buf, bytes, MemKind::kCuda);  // MrId 0 on both ranks: source on 0, target on 1
  t->connect(board.allgather(rank, 0, t->local_address()));
  auto descs = board.allgather(rank, 1, t->export_mr(0));
  std::vector<uint8_t> mine(reinterpret_cast<uint8_t*>(&raw_handle),
                            reinterpret_cast<uint8_t*>(&raw_handle) + sizeof raw_handle);
  auto raw_handles = board.allgather(rank, 2, mine);
  cudaStream_t raw_stream = nullptr;
  uint8_t* raw_dst = nullptr;
  void* raw_mapping = nullptr;
  if (rank == 0) {
    t->import_mr(1, 0, descs[1]);
    cuda_ipc::WireRegion w;
    std::memcpy(&w, descs[1].data(), sizeof w);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, raw_handles[1].data(), sizeof h);
    check(cudaIpcOpenMemHandle(&raw_mapping, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle (baseline)");
    raw_dst = static_cast<uint8_t*>(raw_mapping);
    check(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking), "stream");
    cudaDeviceProp p0{}, p1{};
    cudaGetDeviceProperties(&p0, device);
    int peer_dev = descs[1].size() == sizeof w ? w.device : -1;
    cudaGetDeviceProperties(&p1, peer_dev);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::printf("# cuda-ipc benchmark: rank 0 (pid %d, GPU %d %s) -> rank 1 (GPU %d %s), host %s\n", getpid(), device,
                p0.name, peer_dev, p1.name, host);
    std::printf(
        "# median of %d reps after 1 warm-up; N = clamp(2 GiB / size, 100, 20000) writes per rep; "
        "options: %u streams, max_outstanding %u, copies %s\n",
        reps, spec.cuda_ipc.num_streams, spec.cuda_ipc.max_outstanding,
        batch_copies ? "batched (one cudaMemcpyBatchAsync per poll)" : "one cudaMemcpyAsync each");
    std::printf("# ratio = backend rate / raw rate (same sizes, same run); Mw/s = million writes per second\n");
    std::printf("%10s %7s | %9s %8s | %8s %6s | %8s %6s | %8s %6s | %9s %6s\n", "size_B", "N", "raw_GB/s", "raw_Mw/s",
                "wr_Mw/s", "ratio", "w32_Mw/s", "ratio", "b32_Mw/s", "ratio", "rawB_Mw/s", "ratio");
  }
  for (uint64_t size = 64; size <= (16ull << 20); size *= 4) {
    uint64_t n = iters_for(size);
    double secs[kVariants] = {0, 0, 0, 0, 0};
    bool have_raw_batch = true;
    for (int v = 0; v < kVariants; ++v) {
      std::vector<double> times;
      for (int rep = 0; rep <= reps; ++rep) {
        board.barrier(rank);
        double deadline = now_s() + 60;
        double t0 = now_s();
        if (rank == 0) {
          if (v == 0) {
            for (uint64_t i = 0; i < n; ++i)
              check(cudaMemcpyAsync(raw_dst + dst_offset(i, size), buf, size, cudaMemcpyDeviceToDevice, raw_stream),
                    "raw copy");
            check(cudaStreamSynchronize(raw_stream), "raw sync");
          } else if (v == 4) {
            have_raw_batch = have_raw_batch && raw_batch(raw_dst, buf, size, n, raw_stream);
          } else {
            run_backend(*t, size, n, v == 1 ? 1 : 32, v == 3, deadline);
          }
        } else if (v != 0 && v != 4) {
          drain(*t, n, deadline);
        }
        if (rep > 0) times.push_back(now_s() - t0);
      }
      std::sort(times.begin(), times.end());
      secs[v] = times[times.size() / 2];
    }
    if (rank == 0) {
      auto gbs = [&](int v) { return double(size) * n / secs[v] / 1e9; };
      auto mws = [&](int v) { return double(n) / secs[v] / 1e6; };
      std::printf("%10llu %7llu | %9.2f %8.3f | %8.3f %6.3f | %8.3f %6.3f | %8.3f %6.3f", (unsigned long long)size,
                  (unsigned long long)n, gbs(0), mws(0), mws(1), secs[0] / secs[1], mws(2), secs[0] / secs[2], mws(3),
                  secs[0] / secs[3]);
      if (have_raw_batch)
        std::printf(" | %9.3f %6.3f\n", mws(4), secs[0] / secs[4]);
      else
        std::printf(" | %9s %6s\n", "n/a", "n/a");
      std::fflush(stdout);
    }
  }
  board.barrier(rank);
  if (raw_mapping) cudaIpcCloseMemHandle(raw_mapping);
  t.reset();
  board.barrier(rank);
  cudaFree(buf);
  if (raw_target) cudaFree(raw_target);
  board.report(rank, "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--child") {
    uint32_t rank = static_cast<uint32_t>(std::atoi(argv[3]));
    try {
      return child(argv[2], rank, std::atoi(argv[4]), std::atoi(argv[5]), std::string(argv[6]) == "batch");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_cuda_ipc rank %u: %s\n", rank, e.what());
      try {
        testkit::Board::attach(argv[2]).report(rank, e.what());
      } catch (...) {
      }
      return 1;
    }
  }
  int reps = argc >= 2 ? std::atoi(argv[1]) : 5;
  if (reps < 1) reps = 1;
  const std::string mode = argc >= 3 ? argv[2] : "batch";
  if (mode != "batch" && mode != "loop") {
    std::fprintf(stderr, "bench_cuda_ipc: copy mode '%s' is neither 'batch' nor 'loop'\n", mode.c_str());
    return 2;
  }
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
    std::printf("bench_cuda_ipc: skipped: no CUDA GPU\n");
    return 0;
  }
  if (ngpu < 2) std::printf("# only one GPU: both ranks on GPU 0\n");
  std::string name = "/anyep-cipc-bench-" + std::to_string(getpid());
  testkit::Board board = testkit::Board::create(name, 2);
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return 1;
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < 2; ++r)
    argvs.push_back(
        {self, "--child", name, std::to_string(r), std::to_string(ngpu >= 2 ? r : 0), std::to_string(reps), mode});
  std::string failures = testkit::spawn_and_wait(argvs, board, 500);
  if (!failures.empty()) {
    std::fprintf(stderr, "bench_cuda_ipc failed:\n%s", failures.c_str());
    return 1;
  }
  return 0;
}
