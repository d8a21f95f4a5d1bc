// Loopback immediates go through lock-free per-(source, destination) queues with a locked
// overflow: posting order per pair survives a full queue, several sources interleave without
// loss, and with the two endpoints on two threads every immediate finds its data in place.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "transport/loopback/loopback_transport.h"

namespace anyep::transport {
namespace {

struct Cluster {
  std::shared_ptr<loopback::Fabric> fabric;
  std::vector<std::unique_ptr<Transport>> ep;
  std::vector<std::vector<uint64_t>> mem;
  explicit Cluster(uint32_t n, size_t words) : fabric(loopback::make_fabric(n)), mem(n, std::vector<uint64_t>(words)) {
    for (uint32_t r = 0; r < n; ++r) ep.push_back(loopback::make_endpoint(fabric, r));
    std::vector<std::vector<uint8_t>> addrs;
    for (auto& e : ep) addrs.push_back(e->local_address());
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(ep[r]->register_memory(mem[r].data(), words * 8, MemKind::kHost), 0u);
      ep[r]->connect(addrs);
    }
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t p = 0; p < n; ++p) ep[r]->import_mr(p, 0, ep[p]->export_mr(0));
  }
};

// Drains up to `want` immediates from `t`, `batch` at a time (small batches split the ring and
// the overflow across calls).
std::vector<ImmEvent> drain(Transport& t, size_t want, size_t batch) {
  std::vector<ImmEvent> got;
  std::vector<ImmEvent> im(batch);
  Completion c[64];
  for (int spins = 0; got.size() < want && spins < 1000000; ++spins) {
    size_t nc = 0, ni = 0;
    EXPECT_EQ(t.poll(c, 64, &nc, im.data(), batch, &ni), 0);
    got.insert(got.end(), im.begin(), im.begin() + static_cast<long>(ni));
  }
  return got;
}

TEST(LoopbackQueues, OrderSurvivesAFullQueueAndItsOverflow) {
  Cluster cl(2, 8);
  constexpr uint32_t kN = 12000;  // more than one pair's ring holds (4096 with 2 ranks): the rest spill
  for (uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(cl.ep[0]->post_imm(1, i, i), 0);
    if (i == 6000) {  // drain part of it mid-way, then keep posting (ring and overflow both in use)
      const auto part = drain(*cl.ep[1], 700, 7);
      ASSERT_EQ(part.size(), 700u);
      for (uint32_t k = 0; k < 700; ++k) ASSERT_EQ(part[k].imm, k);
    }
  }
  const auto rest = drain(*cl.ep[1], kN - 700, 13);
  ASSERT_EQ(rest.size(), kN - 700);
  for (uint32_t k = 0; k < rest.size(); ++k) {
    ASSERT_EQ(rest[k].imm, k + 700) << "out of posting order at " << k;
    ASSERT_EQ(rest[k].src_rank, 0u);
  }
  size_t nc = 0, ni = 0;
  Completion c[8];
  ImmEvent im[8];
  ASSERT_EQ(cl.ep[1]->poll(c, 8, &nc, im, 8, &ni), 0);
  EXPECT_EQ(ni, 0u) << "nothing duplicated";
  // The sender's completions all come back, in order, across several polls.
  std::vector<Completion> comps;
  for (int k = 0; k < 2000 && comps.size() < kN; ++k) {
    ASSERT_EQ(cl.ep[0]->poll(c, 8, &nc, im, 8, &ni), 0);
    comps.insert(comps.end(), c, c + nc);
  }
  ASSERT_EQ(comps.size(), kN);
  for (uint32_t k = 0; k < kN; ++k) ASSERT_EQ(comps[k].context, k);
}

TEST(LoopbackQueues, SeveralSourcesInterleaveWithoutLoss) {
  Cluster cl(4, 8);
  for (uint32_t i = 0; i < 900; ++i)
    for (uint32_t s = 1; s < 4; ++s) ASSERT_EQ(cl.ep[s]->post_imm(0, s * 100000 + i, 0), 0);
  const auto got = drain(*cl.ep[0], 2700, 32);
  ASSERT_EQ(got.size(), 2700u);
  std::vector<uint32_t> next(4, 0);
  for (const ImmEvent& e : got) {
    ASSERT_GE(e.src_rank, 1u);
    ASSERT_EQ(e.imm, e.src_rank * 100000 + next[e.src_rank]) << "per-pair order";
    ++next[e.src_rank];
  }
}

TEST(LoopbackQueues, ImmediateFindsItsDataAcrossThreads) {
  // Rank 0's thread writes value k into slot k of rank 1 with immediate k; rank 1's thread, on
  // each immediate, reads the slot. Under TSan this also checks the queue publishes the data.
  constexpr uint32_t kN = 20000;
  Cluster cl(2, kN);
  std::thread sender([&] {
    for (uint32_t k = 0; k < kN; ++k) {
      cl.mem[0][k] = k + 1;
      WriteDesc w{1, 0, k * 8ull, 0, k * 8ull, 8, true, k, k};
      while (cl.ep[0]->post_write(w) == -EAGAIN) {
      }
      if (k % 64 == 0) {  // keep the sender's completion list short
        Completion c[64];
        ImmEvent im[1];
        size_t nc = 0, ni = 0;
        cl.ep[0]->poll(c, 64, &nc, im, 1, &ni);
      }
    }
  });
  uint32_t bad = 0, next = 0;
  std::vector<ImmEvent> im(64);
  Completion c[1];
  for (long spins = 0; next < kN && spins < 200000000; ++spins) {
    size_t nc = 0, ni = 0;
    if (cl.ep[1]->poll(c, 1, &nc, im.data(), im.size(), &ni) != 0) {
      ++bad;
      break;
    }
    for (size_t i = 0; i < ni; ++i, ++next) {
      bad += im[i].imm != next;
      bad += cl.mem[1][im[i].imm] != im[i].imm + 1u;
    }
  }
  sender.join();
  EXPECT_EQ(next, kN);
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace anyep::transport
