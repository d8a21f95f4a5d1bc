// kernels/ht/internode_protocol.h as plain C++: the topology (rail peers), the per-token node mask
// and forward lists against a brute-force model over random top-k choices, and the chunk ring's
// credit arithmetic, also where the 64-bit running totals pass 2^32 (they never reset).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "kernels/ht/internode_protocol.h"

using namespace anyep;
using namespace anyep::ht::internode;

TEST(HtInternodeProtocol, RailPeersKeepTheLocalIndex) {
  for (int k : {1, 2, 4, 8}) {
    const Topology t{k};
    for (int r = 0; r < 4 * k; ++r)
      for (int n = 0; n < 4; ++n) {
        const int p = t.rail_peer(r, n);
        EXPECT_EQ(t.node(p), n) << "k " << k << " rank " << r;
        EXPECT_EQ(t.local(p), t.local(r)) << "k " << k << " rank " << r;
      }
  }
}

TEST(HtInternodeProtocol, NodeMaskAndForwardListsMatchAModel) {
  std::mt19937_64 rng(20261123);
  for (int trial = 0; trial < 2000; ++trial) {
    const int k = 1 << (rng() % 4);        // ranks per node: 1, 2, 4, 8
    const int nodes = 1 + int(rng() % 8);  // 1..8 nodes
    const int R = k * nodes, epr = 1 + int(rng() % 4), topk = 1 + int(rng() % 8);
    const Topology t{k};
    std::vector<int64_t> idx(topk);
    for (auto& e : idx) e = (rng() % 5 == 0) ? -1 : int64_t(rng() % uint64_t(R * epr));  // -1: masked slot
    // Model: the set of owner ranks, then their nodes.
    std::set<int> owners;
    for (int64_t e : idx)
      if (e >= 0) owners.insert(int(e / epr));
    uint64_t want_nodes = 0;
    for (int o : owners) want_nodes |= 1ull << (o / k);
    ASSERT_EQ(token_nodes(idx.data(), topk, epr, t), want_nodes) << "trial " << trial;
    for (int n = 0; n < nodes; ++n) {
      uint32_t want = 0;
      for (int o : owners)
        if (o / k == n) want |= 1u << (o % k);
      ASSERT_EQ(token_forward(idx.data(), topk, epr, t, n), want) << "trial " << trial << " node " << n;
      // A node is crossed to exactly when something is forwarded there: one send per node, never zero.
      ASSERT_EQ(want != 0, ((want_nodes >> n) & 1) != 0) << "trial " << trial << " node " << n;
    }
  }
}

TEST(HtInternodeProtocol, ChunkRingCredits) {
  const ChunkRing ring{8};
  for (uint64_t base : {uint64_t{0}, (uint64_t{1} << 32) - 5, uint64_t{1} << 40}) {
    for (uint64_t seq = base; seq < base + 40; ++seq) {
      EXPECT_EQ(ring.slot(seq), seq % 8);
      const uint64_t need = ring.freed_needed(seq);
      EXPECT_EQ(need, seq >= 8 ? seq - 7 : 0);
      // The chunk that last used this slot (seq - 8) is the newest that must be freed.
      if (seq >= 8) {
        EXPECT_FALSE(ring.may_write(seq, seq - 8)) << seq;
        EXPECT_TRUE(ring.may_write(seq, seq - 7)) << seq;
      } else {
        EXPECT_TRUE(ring.may_write(seq, 0));
      }
    }
    // A tail the sender could not have produced is flagged (a duplicated signal).
    EXPECT_TRUE(ring.tail_possible(base + 8, base, base + 100));
    EXPECT_FALSE(ring.tail_possible(base + 9, base, base + 100));
    EXPECT_FALSE(ring.tail_possible(base + 101, base + 100, base + 100));
  }
}

TEST(HtInternodeProtocol, TailSignalCarriesTheOrderedFence) {
  const channel::TransferCmd fenced = tail_signal(3, 17, 5);
  EXPECT_EQ(channel::cmd_op(fenced), channel::Op::kSignal);
  EXPECT_EQ(channel::cmd_dst_rank(fenced), 3u);
  EXPECT_EQ(channel::cmd_counter(fenced), 17u);
  EXPECT_EQ(channel::cmd_tag(fenced), 5u);
  EXPECT_NE(channel::cmd_flags(fenced) & channel::cmd::kFenceOrdered, 0);
  EXPECT_EQ(channel::cmd_flags(tail_signal(3, 17, 5, false)) & channel::cmd::kFenceOrdered, 0);
  EXPECT_EQ(channel::cmd_flags(credit_signal(1, 2, 9)) & channel::cmd::kFenceOrdered, 0);
}

// The rail exchange's region: blocks never overlap, stay inside the region and 16-byte aligned,
// and region_bytes() is enough for the rows it was asked for.
TEST(HtInternodeProtocol, ExchangeBlocksTileTheRegion) {
  for (int nodes : {1, 2, 3, 8, 64})
    for (uint64_t bytes : {uint64_t{4096 + 64}, uint64_t{1} << 20, (uint64_t{1} << 30) + 48}) {
      const Exchange ex{bytes, nodes};
      const uint64_t b = ex.block_bytes();
      ASSERT_EQ(b % 16, 0u);
      for (int n = 0; n < nodes; ++n) {
        EXPECT_EQ(ex.send_off(n) % 16, 0u);
        EXPECT_EQ(ex.recv_off(n), ex.send_off(nodes - 1) + b * uint64_t(n + 1));
        EXPECT_LE(ex.recv_off(n) + b, bytes) << nodes << " nodes, " << bytes << " bytes";
      }
      for (uint64_t row : {uint64_t{16}, uint64_t{4240}})
        if (const int64_t cap = ex.row_capacity(row); cap > 0) {
          EXPECT_LE(kBlockHeaderBytes + uint64_t(cap) * row, b);
          EXPECT_GT(kBlockHeaderBytes + uint64_t(cap + 1) * row, b);
        }
    }
  for (uint64_t rows : {uint64_t{0}, uint64_t{1}, uint64_t{4096}})
    for (int nodes : {2, 5}) {
      const uint64_t need = Exchange::region_bytes(rows, 4240, nodes);
      EXPECT_GE((Exchange{need, nodes}.row_capacity(4240)), int64_t(rows)) << rows << " rows, " << nodes << " nodes";
    }
  EXPECT_EQ((Exchange{4096, 2}.block_bytes()), 0u);  // no room past the control space
  EXPECT_EQ(tail_counter(3), 3u);
  EXPECT_EQ(credit_counter(8, 3), 11u);
  EXPECT_EQ(exchange_counters(8), 16u);
}
