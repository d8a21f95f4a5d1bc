// anyep/tests/gpu/transport/test_cuda_ipc.cpp — the cuda-ipc backend with GPU memory: all-to-all
// with immediates in one process (two endpoints, raw pointers) and across processes (CUDA IPC,
// one or two GPUs), bad input, backpressure and a full immediate inbox. Skips without GPUs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "../gpu_count.h"
#include "alltoall.h"
#include "common/error.h"
#include "common/gpu_runtime.h"
#include "testkit/shm_board.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"

using namespace anyep;
using namespace anyep::transport;

namespace {

int gpu_count() { return ::anyep::gputest::count_gpus().n; }

// Skips (saying why) only without enough GPUs; an unexpected CUDA error fails (tests/gpu/gpu_count.h).
#define REQUIRE_GPUS(k) ANYEP_REQUIRE_GPUS(k)

using DevPtr = std::shared_ptr<uint8_t>;
DevPtr dev_alloc(int device, size_t bytes, uint8_t fill) {
  cudaSetDevice(device);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  cudaMemset(p, fill, bytes);
  cudaDeviceSynchronize();
  return DevPtr(static_cast<uint8_t*>(p), [device](uint8_t* q) {
    cudaSetDevice(device);
    cudaFree(q);
  });
}
std::vector<uint8_t> to_host(const uint8_t* dev, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// n endpoints in this process; endpoint r drives devices[r] and registers send (MrId 0) and recv
// (MrId 1). Buffers outlive the endpoints (declared first, destroyed last).
struct Job {
  std::vector<DevPtr> send, recv;
  std::vector<std::unique_ptr<Transport>> t;
};
Job make_job(const std::vector<int>& devices, cuda_ipc::CudaIpcConfig base, size_t send_bytes, size_t recv_bytes,
             uint8_t recv_fill = test::kRecvFill) {
  Job j;
  const uint32_t n = static_cast<uint32_t>(devices.size());
  std::vector<std::vector<uint8_t>> addrs;
  for (uint32_t r = 0; r < n; ++r) {
    j.send.push_back(dev_alloc(devices[r], send_bytes, 0));
    j.recv.push_back(dev_alloc(devices[r], recv_bytes, recv_fill));
    base.rank = r;
    base.num_ranks = n;
    base.device = devices[r];
    j.t.push_back(cuda_ipc::make_endpoint(base));
    EXPECT_EQ(j.t[r]->register_memory(j.send[r].get(), send_bytes, MemKind::kCuda), 0u);
    EXPECT_EQ(j.t[r]->register_memory(j.recv[r].get(), recv_bytes, MemKind::kCuda), 1u);
    addrs.push_back(j.t[r]->local_address());
  }
  for (uint32_t r = 0; r < n; ++r) {
    j.t[r]->connect(addrs);
    for (uint32_t p = 0; p < n; ++p) j.t[r]->import_mr(p, 1, j.t[p]->export_mr(1));
  }
  return j;
}

struct Polled {
  std::vector<Completion> comps;
  std::vector<ImmEvent> imms;
};
// Polls `t` for `ms` milliseconds (or until `want_comps` completions and `want_imms` immediates).
Polled poll_for(Transport& t, int ms, size_t want_comps = SIZE_MAX, size_t want_imms = SIZE_MAX) {
  Polled out;
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  Completion c[16];
  ImmEvent i[16];
  while (std::chrono::steady_clock::now() < end && (out.comps.size() < want_comps || out.imms.size() < want_imms)) {
    size_t nc = 0, ni = 0;
    EXPECT_EQ(t.poll(c, 16, &nc, i, 16, &ni), 0) << t.last_error();
    out.comps.insert(out.comps.end(), c, c + nc);
    out.imms.insert(out.imms.end(), i, i + ni);
  }
  return out;
}

// ---- single process: two or three endpoints, one thread each ---------------------------------

void alltoall_in_process(const std::vector<int>& devices) {
  test::AllToAllConfig cfg;
  cfg.seed = 42;
  const uint32_t n = static_cast<uint32_t>(devices.size());
  Job j = make_job(devices, {}, test::send_bytes(cfg), test::recv_bytes(cfg, n));
  for (uint32_t r = 0; r < n; ++r) {
    cudaSetDevice(devices[r]);
    ASSERT_NO_THROW(test::fill_buffers(r, cfg, n, j.send[r].get(), j.recv[r].get()));
  }
  std::vector<std::string> err(n);
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < n; ++r)
    th.emplace_back([&, r] { err[r] = test::run_alltoall(*j.t[r], cfg, 0, 1, j.recv[r].get()); });
  for (auto& x : th) x.join();
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_EQ(err[r], "");
    EXPECT_EQ(test::check_recv_buffer(r, n, cfg, j.recv[r].get()), "");
  }
}

TEST(CudaIpcTransport, CapabilitiesLikeEfa) {
  REQUIRE_GPUS(1);
  auto t = cuda_ipc::make_endpoint({});
  const Capabilities& c = t->capabilities();
  EXPECT_EQ(c.backend, "cuda-ipc");
  EXPECT_FALSE(c.ordered_writes);
  EXPECT_FALSE(c.native_atomics);
  EXPECT_TRUE(c.gpu_memory);
  EXPECT_EQ(c.imm_bytes, 4u);
}

TEST(CudaIpcTransport, AllToAllInOneProcessOneGpu) {
  REQUIRE_GPUS(1);
  alltoall_in_process({0, 0, 0});
}

TEST(CudaIpcTransport, AllToAllInOneProcessTwoGpus) {
  REQUIRE_GPUS(2);
  alltoall_in_process({0, 1});
}

// ---- bad input: rejected with -EINVAL and a message, nothing copied, nothing delivered -------

TEST(CudaIpcTransport, BadWritesAreRejectedBeforeAnyCopy) {
  REQUIRE_GPUS(1);
  constexpr size_t kBytes = 4096;
  Job j = make_job({0, 0}, {}, kBytes, kBytes);
  std::vector<uint8_t> src(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = test::pattern(0, i);
  ASSERT_EQ(cudaMemcpy(j.send[0].get(), src.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  Transport& t = *j.t[0];
  struct Case {
    WriteDesc w;
    const char* says;
  } cases[] = {
      {{2, 0, 0, 1, 0, 16, true, 1, 0}, "unknown peer rank 2"},
      {{1, 7, 0, 1, 0, 16, true, 1, 0}, "source region 7 is not registered"},
      {{1, 0, 4000, 1, 0, 200, true, 1, 0}, "is not inside local region 0"},
      {{1, 0, 0, 1, 4090, 10, true, 1, 0}, "is past the end of region 1 of rank 1"},
      {{1, 0, 0, 1, UINT64_MAX, 2, true, 1, 0}, "is past the end of region 1 of rank 1"},
      {{1, 0, 0, 5, 0, 16, true, 1, 0}, "region 5 of rank 1 was never imported"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(t.post_write(c.w), -EINVAL) << c.says;
    EXPECT_NE(t.last_error().find(c.says), std::string::npos) << t.last_error();
  }
  EXPECT_EQ(t.post_imm(9, 1, 0), -EINVAL);
  EXPECT_NE(t.last_error().find("unknown peer rank 9"), std::string::npos) << t.last_error();
  // A batch stops at its first bad write; the good ones before it go out.
  WriteDesc batch[3] = {
      {1, 0, 0, 1, 0, 16, true, 77, 5}, {1, 0, 0, 1, 4095, 2, true, 1, 6}, {1, 0, 0, 1, 64, 16, true, 1, 7}};
  size_t posted = 99;
  EXPECT_EQ(t.post_writes(batch, 3, &posted), -EINVAL);
  EXPECT_EQ(posted, 1u);
  Polled s = poll_for(t, 2000, 1, 0);
  Polled r = poll_for(*j.t[1], 2000, 0, 1);
  Polled s2 = poll_for(t, 50), r2 = poll_for(*j.t[1], 50);  // nothing else may show up
  ASSERT_EQ(s.comps.size() + s2.comps.size(), 1u);
  EXPECT_EQ(s.comps[0].context, 5u);
  EXPECT_EQ(s.comps[0].status, 0);
  ASSERT_EQ(r.imms.size() + r2.imms.size(), 1u);
  EXPECT_EQ(r.imms[0].src_rank, 0u);
  EXPECT_EQ(r.imms[0].imm, 77u);
  std::vector<uint8_t> got = to_host(j.recv[1].get(), kBytes);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(got[i], i < 16 ? src[i] : test::kRecvFill) << "byte " << i;
}

TEST(CudaIpcTransport, BadSetupIsRejected) {
  REQUIRE_GPUS(1);
  cuda_ipc::CudaIpcConfig o;
  o.device = 99;
  EXPECT_THROW(cuda_ipc::make_endpoint(o), InvalidArgument);
  o.device = 0;
  o.rank = 2;
  o.num_ranks = 2;
  EXPECT_THROW(cuda_ipc::make_endpoint(o), InvalidArgument);
  o.rank = 0;
  o.imm_slots = 1000;  // not a power of two
  EXPECT_THROW(cuda_ipc::make_endpoint(o), InvalidArgument);
  o.imm_slots = 64;
  auto t = cuda_ipc::make_endpoint(o);
  // Not connected yet.
  EXPECT_EQ(t->post_imm(1, 0, 0), -EINVAL);
  EXPECT_NE(t->last_error().find("not connected"), std::string::npos) << t->last_error();
  // A host pointer passed as GPU memory is refused, and so is a null base.
  std::vector<uint8_t> host(256);
  EXPECT_THROW(t->register_memory(host.data(), host.size(), MemKind::kCuda), InvalidArgument);
  EXPECT_THROW(t->register_memory(nullptr, 16, MemKind::kCuda), InvalidArgument);
  DevPtr d = dev_alloc(0, 4096, 0);
  EXPECT_THROW(t->register_memory(d.get() + 1024, 64 << 20, MemKind::kCuda), InvalidArgument);  // past the allocation
  EXPECT_EQ(t->register_memory(d.get() + 1024, 1024, MemKind::kCuda), 0u);  // interior region is fine
  // Host memory registers as a host region (peers write it with process_vm_writev, since the LL
  // proxy path's host-staged buffer); a null one is refused like a null GPU region.
  EXPECT_EQ(t->register_memory(host.data(), host.size(), MemKind::kHost), 1u);
  EXPECT_THROW(t->register_memory(nullptr, 16, MemKind::kHost), InvalidArgument);
  EXPECT_THROW(t->export_mr(3), InvalidArgument);
  if (gpu_count() >= 2) {
    DevPtr other = dev_alloc(1, 4096, 0);
    EXPECT_THROW(t->register_memory(other.get(), 4096, MemKind::kCuda), InvalidArgument);
  }
  // Malformed descriptors and addresses.
  std::vector<uint8_t> desc = t->export_mr(0);
  EXPECT_THROW(t->import_mr(5, 0, desc), InvalidArgument);
  EXPECT_THROW(t->import_mr(1, 0, std::vector<uint8_t>(desc.begin(), desc.end() - 1)), InvalidArgument);
  std::vector<uint8_t> bad = desc;
  bad[0] ^= 0xff;
  EXPECT_THROW(t->import_mr(1, 0, bad), InvalidArgument);
  o.rank = 1;
  auto peer = cuda_ipc::make_endpoint(o);
  EXPECT_THROW(t->connect({t->local_address()}), InvalidArgument);                         // one address for two ranks
  EXPECT_THROW(t->connect({peer->local_address(), t->local_address()}), InvalidArgument);  // swapped
  EXPECT_THROW(t->connect({t->local_address(), std::vector<uint8_t>(7)}), InvalidArgument);  // truncated
  t->connect({t->local_address(), peer->local_address()});
  EXPECT_THROW(t->connect({t->local_address(), peer->local_address()}), InvalidArgument);  // twice
}

// ---- backpressure -----------------------------------------------------------------------------

TEST(CudaIpcTransport, OutstandingLimitGivesEagainUntilPolled) {
  REQUIRE_GPUS(1);
  cuda_ipc::CudaIpcConfig o;
  o.max_outstanding = 4;
  constexpr size_t kBytes = 8 << 20;
  Job j = make_job({0, 0}, o, kBytes, kBytes);
  Transport& t = *j.t[0];
  for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(t.post_write({1, 0, 0, 1, 0, kBytes, true, i, i}), 0) << t.last_error();
  EXPECT_EQ(t.post_write({1, 0, 0, 1, 0, kBytes, true, 4, 4}), -EAGAIN);
  EXPECT_NE(t.last_error().find("max_outstanding"), std::string::npos) << t.last_error();
  EXPECT_EQ(t.post_imm(1, 4, 4), -EAGAIN);
  Polled s = poll_for(t, 5000, 4, 0);
  ASSERT_EQ(s.comps.size(), 4u);
  EXPECT_EQ(t.post_write({1, 0, 0, 1, 0, kBytes, true, 4, 4}), 0) << t.last_error();
  s = poll_for(t, 5000, 1, 0);
  EXPECT_EQ(s.comps.size(), 1u);
  Polled r = poll_for(*j.t[1], 5000, 0, 5);
  EXPECT_EQ(r.imms.size(), 5u);
}

// Many small writes between polls: they are queued and issued together (one batch call where
// the runtime has cudaMemcpyBatchAsync, else one copy each; both are run). Every write's bytes
// are checked the moment its immediate arrives (an immediate that overtook its copy fails), every
// immediate and every completion exactly once, then every byte of the target (no stray write).
class CudaIpcBatched : public ::testing::TestWithParam<bool> {};
TEST_P(CudaIpcBatched, SmallWritesBetweenPollsLandBeforeTheirImmediates) {
  REQUIRE_GPUS(1);
  cuda_ipc::CudaIpcConfig o;
  o.batch_copies = GetParam();
  o.max_outstanding = 512;
  constexpr uint32_t kN = 3000, kSlot = 8192;
  constexpr size_t kSend = 1 << 20, kRecv = size_t{kN} * kSlot;
  Job j = make_job({0, gpu_count() >= 2 ? 1 : 0}, o, kSend, kRecv);
  std::vector<uint8_t> src(kSend);
  for (size_t i = 0; i < kSend; ++i) src[i] = test::pattern(0, i);
  cudaSetDevice(0);
  ASSERT_EQ(cudaMemcpy(j.send[0].get(), src.data(), kSend, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<WriteDesc> w(kN);
  for (uint32_t i = 0; i < kN; ++i) {
    const uint64_t r = test::mix64(i), len = 1 + r % 7168, so = (r >> 20) % (kSend - len);
    w[i] = {1, 0, so, 1, uint64_t{i} * kSlot, len, true, i, 1000000 + i};
  }
  Transport& t = *j.t[0];
  Transport& peer = *j.t[1];
  std::vector<int> imm_seen(kN, 0), comp_seen(kN, 0);
  std::vector<uint8_t> got(kSlot);
  size_t next = 0, comps = 0, imms = 0;
  std::string bad;
  Completion cq[64];
  ImmEvent iq[64];
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((comps < kN || imms < kN) && bad.empty() && std::chrono::steady_clock::now() < end) {
    if (next < kN) {  // bursts of 1..300 writes per post_writes, then one poll (a proxy's loop)
      size_t posted = 0;
      const int rc = t.post_writes(&w[next], std::min<size_t>(kN - next, 1 + test::mix64(next) % 300), &posted);
      ASSERT_TRUE(rc == 0 || rc == -EAGAIN) << t.last_error();
      next += posted;
    }
    size_t nc = 0, ni = 0;
    ASSERT_EQ(t.poll(cq, 64, &nc, iq, 64, &ni), 0) << t.last_error();
    for (size_t k = 0; k < nc; ++k) {
      ASSERT_EQ(cq[k].status, 0) << t.last_error();
      ASSERT_GE(cq[k].context, 1000000u);
      ASSERT_LT(cq[k].context, 1000000u + kN);
      ++comp_seen[cq[k].context - 1000000], ++comps;
    }
    ASSERT_EQ(peer.poll(cq, 64, &nc, iq, 64, &ni), 0) << peer.last_error();
    for (size_t k = 0; k < ni; ++k) {
      const uint32_t i = iq[k].imm;
      ASSERT_LT(i, kN);
      ++imm_seen[i], ++imms;
      ASSERT_EQ(cudaMemcpy(got.data(), j.recv[1].get() + w[i].remote_offset, w[i].length, cudaMemcpyDeviceToHost),
                cudaSuccess);
      if (std::memcmp(got.data(), src.data() + w[i].local_offset, w[i].length) != 0)
        bad = "immediate " + std::to_string(i) + " arrived before its data";
    }
  }
  EXPECT_EQ(bad, "");
  EXPECT_EQ(comps, kN);
  EXPECT_EQ(imms, kN);
  for (uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(imm_seen[i], 1) << "immediate " << i;
    ASSERT_EQ(comp_seen[i], 1) << "completion " << i;
  }
  const std::vector<uint8_t> all = to_host(j.recv[1].get(), kRecv);
  for (uint32_t i = 0; i < kN; ++i)
    for (uint64_t b = 0; b < kSlot; ++b) {
      const uint8_t want = b < w[i].length ? src[w[i].local_offset + b] : test::kRecvFill;
      ASSERT_EQ(all[uint64_t{i} * kSlot + b], want) << "write " << i << " byte " << b;
    }
}
INSTANTIATE_TEST_SUITE_P(CopyPath, CudaIpcBatched, ::testing::Values(true, false),
                         [](const auto& i) { return i.param ? std::string("batch_api") : std::string("one_by_one"); });

// A peer that does not poll fills its inbox: immediates wait at the sender (never dropped) and
// their operations stay incomplete until the peer drains; each arrives exactly once.
TEST(CudaIpcTransport, FullInboxKeepsImmediatesPending) {
  REQUIRE_GPUS(1);
  cuda_ipc::CudaIpcConfig o;
  o.imm_slots = 4;
  o.max_outstanding = 64;
  Job j = make_job({0, 0}, o, 4096, 4096);
  Transport& t = *j.t[0];
  constexpr uint32_t kN = 10;
  for (uint32_t i = 0; i < kN; ++i) {
    int rc = i % 2 ? t.post_imm(1, i, i) : t.post_write({1, 0, 0, 1, i * 64, 64, true, i, i});
    ASSERT_EQ(rc, 0) << t.last_error();
  }
  Polled s = poll_for(t, 200);
  EXPECT_EQ(s.comps.size(), 4u) << "only as many operations complete as the peer's inbox holds";
  std::vector<int> seen(kN, 0);
  size_t comps = s.comps.size();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  size_t got = 0;
  while (got < kN && std::chrono::steady_clock::now() < deadline) {
    Polled r = poll_for(*j.t[1], 1);
    EXPECT_LE(r.imms.size(), 4u);
    for (const ImmEvent& e : r.imms) {
      ASSERT_EQ(e.src_rank, 0u);
      ASSERT_LT(e.imm, kN);
      ++seen[e.imm], ++got;
    }
    comps += poll_for(t, 1).comps.size();
  }
  comps += poll_for(t, 20, kN - comps, 0).comps.size();
  EXPECT_EQ(got, kN);
  EXPECT_EQ(comps, kN);
  for (uint32_t i = 0; i < kN; ++i) EXPECT_EQ(seen[i], 1) << "immediate " << i;
}

// ---- several processes: CUDA IPC proper ---------------------------------------------------------

struct MpCase {
  const char* name;
  uint32_t ranks;
  int gpus;  // ranks are spread round robin over this many GPUs
  uint32_t writes_per_peer;
  uint64_t max_len;
  uint32_t imm_slots;
  uint32_t max_outstanding;
};

void PrintTo(const MpCase& c, std::ostream* os) { *os << c.name; }

class CudaIpcMultiProcess : public ::testing::TestWithParam<MpCase> {};

TEST_P(CudaIpcMultiProcess, AllToAllEveryByteEveryImmediate) {
  const MpCase& c = GetParam();
  REQUIRE_GPUS(c.gpus);
  std::string board_name = "/anyep-cipc-test-" + std::to_string(getpid()) + "-" + c.name;
  testkit::Board board = testkit::Board::create(board_name, c.ranks);
  std::vector<std::vector<std::string>> argv;
  for (uint32_t r = 0; r < c.ranks; ++r)
    argv.push_back({CUDA_IPC_PEER, board_name, std::to_string(r), std::to_string(static_cast<int>(r) % c.gpus), "7",
                    std::to_string(c.writes_per_peer), std::to_string(c.max_len), std::to_string(c.imm_slots),
                    std::to_string(c.max_outstanding)});
  EXPECT_EQ(testkit::spawn_and_wait(argv, board, 90), "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaIpcMultiProcess,
                         ::testing::Values(MpCase{"TwoProcessesTwoGpus", 2, 2, 48, 1 << 20, 4096, 1024},
                                           MpCase{"TwoProcessesOneGpu", 2, 1, 48, 1 << 20, 4096, 1024},
                                           MpCase{"FourProcessesTwoGpus", 4, 2, 32, 512 << 10, 4096, 1024},
                                           MpCase{"FourProcessesTinyQueues", 4, 2, 32, 64 << 10, 4, 8}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
