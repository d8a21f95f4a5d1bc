// LL buffer layout: the footprint at the DeepEP shape and that regions do not overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/ll/layout.h"

namespace anyep::ll {
namespace {

TEST(LLLayout, DeepEPShapeFootprint) {
  const Layout g{128, 7168, 2, 288};  // the fast layout (default)
  EXPECT_FALSE(g.compact);
  EXPECT_EQ(g.L(), 144);
  EXPECT_EQ(g.msg_bytes(), 16u + 2u * 7168u);
  EXPECT_EQ(g.signal_bytes(), 81920u);  // fixed: (2 halves x 2 kinds + barrier) x kMaxExperts x 4 B
  EXPECT_EQ(g.dispatch_half_bytes(), 288ull * 128ull * 14352ull);
  EXPECT_EQ(g.route_half_bytes(), 0u);
  EXPECT_EQ(g.combine_half_bytes(), 128ull * kMaxTopk * (16ull + 2ull * 7168ull));  // row header + BF16 row
  EXPECT_EQ(g.stage_half_bytes(), 128ull * kMaxTopk * 14352ull);
  EXPECT_EQ(g.total_bytes(), 1175797760ull);  // docs/ll.md; DeepEP needs 2.15 GB here
  EXPECT_EQ(g.msg_used_bytes(true), g.msg_bytes());
  EXPECT_EQ(g.msg_used_bytes(false), 16u + 7168u + 4u * 56u);  // header, e4m3 payload, float scales
  EXPECT_LT(g.total_bytes(), 2150000000ull);

  const Layout c{128, 7168, 2, 288, /*compact=*/true};
  EXPECT_EQ(c.slots_per_token(), kMaxTopk);                              // 144 local experts: capped at 16
  EXPECT_EQ(c.dispatch_half_bytes(), 2ull * 128ull * 16ull * 14352ull);  // R x T x 16 messages, not E x T
  EXPECT_EQ(c.route_half_bytes(), 4ull * 288ull * 128ull);
  EXPECT_EQ(c.total_bytes(), 235814912ull);  // docs/ll.md: a fifth of the fast layout's
  // Everything but the dispatch region and the route lists is where the fast layout has it.
  EXPECT_EQ(c.combine_half_bytes(), g.combine_half_bytes());
  EXPECT_EQ(c.stage_half_bytes(), g.stage_half_bytes());
}

TEST(LLLayout, RegionsAreDisjointAndInside) {
  for (const bool compact : {false, true})
    for (Layout g : {Layout{128, 7168, 2, 288}, Layout{64, 2048, 4, 24}, Layout{1, 128, 1, 1}}) {
      g.compact = compact;
      SCOPED_TRACE(compact ? "compact" : "fast");
      const int64_t L = g.L();
      // Signals fit in their area.
      EXPECT_LE(g.combine_flag_off(1, g.E - 1) + 4, g.signal_bytes());
      EXPECT_LE(g.dispatch_count_off(1, L - 1, g.R - 1) + 4, g.combine_flag_off(0, 0));
      // The dispatch region follows the signals; consecutive slots/regions are one message apart.
      if (compact) {
        const int64_t C = g.slots_per_token(), TC = g.T * C;
        EXPECT_EQ(C, L < kMaxTopk ? L : kMaxTopk);
        EXPECT_EQ(g.dispatch_msg_off(0, 0, 0), g.signal_bytes());
        EXPECT_EQ(g.dispatch_msg_off(0, 0, 1) - g.dispatch_msg_off(0, 0, 0), g.msg_bytes());
        EXPECT_EQ(g.dispatch_msg_off(0, 1 % g.R, 0) - g.dispatch_msg_off(0, 0, 0), g.R > 1 ? TC * g.msg_bytes() : 0u);
        EXPECT_EQ(g.dispatch_msg_off(1, 0, 0), g.signal_bytes() + g.dispatch_half_bytes());
        EXPECT_EQ(g.dispatch_msg_off(1, g.R - 1, TC - 1) + g.msg_bytes(), g.combine_slot_off(0, 0, 0));
        EXPECT_LE(g.dispatch_half_bytes(), static_cast<uint64_t>(g.E * g.T) * g.msg_bytes());  // never above E x T
      } else {
        EXPECT_EQ(g.dispatch_slot_off(0, 0, 0, 0), g.signal_bytes());
        EXPECT_EQ(g.dispatch_slot_off(0, 0, 0, 1) - g.dispatch_slot_off(0, 0, 0, 0), g.msg_bytes());
        EXPECT_EQ(g.dispatch_slot_off(0, 0, 1 % g.R, 0) - g.dispatch_slot_off(0, 0, 0, 0),
                  g.R > 1 ? g.T * g.msg_bytes() : 0u);
        EXPECT_EQ(g.dispatch_slot_off(1, 0, 0, 0), g.signal_bytes() + g.dispatch_half_bytes());
        EXPECT_EQ(g.dispatch_slot_off(1, L - 1, g.R - 1, g.T - 1) + g.msg_bytes(), g.combine_slot_off(0, 0, 0));
      }
      EXPECT_EQ(g.combine_slot_off(1, g.T - 1, kMaxTopk - 1) + g.combine_slot_bytes(), g.stage_slot_off(0, 0, 0));
      EXPECT_EQ(g.stage_slot_off(1, g.T - 1, kMaxTopk - 1) + g.msg_bytes(), g.route_base());
      EXPECT_EQ(g.stage_slot_off(0, 0, 0) % 16, 0u);
      if (compact) {
        // Route lists, then their send staging, end the buffer; every list starts 16-byte aligned
        // (a WRITE's offsets) and holds T entries.
        EXPECT_EQ(g.route_off(0, 0, 0, 0), g.route_base());
        EXPECT_EQ(g.route_off(1, L - 1, g.R - 1, g.T - 1) + 4, g.route_stage_base() - 4 * (g.route_stride() - g.T));
        EXPECT_EQ(g.route_stage_off(1, g.E - 1, g.route_stride() - 1) + 4, g.total_bytes());
        for (int b = 0; b < 2; ++b)
          for (int64_t l = 0; l < L; ++l)
            for (int64_t r = 0; r < g.R; ++r) EXPECT_EQ(g.route_off(b, l, r, 0) % 16, 0u);
        for (int64_t e = 0; e < g.E; ++e) EXPECT_EQ(g.route_stage_off(1, e, 0) % 16, 0u);
      } else {
        EXPECT_EQ(g.route_base(), g.total_bytes());  // no route lists
      }
      EXPECT_LE(g.msg_used_bytes(false), g.msg_bytes());
      // Every message and slot is 16-byte aligned (16-byte vector stores).
      EXPECT_EQ(g.msg_bytes() % 16, 0u);
      EXPECT_EQ(g.signal_bytes() % 16, 0u);
      EXPECT_EQ(g.fp8_scale_offset() % 16, 0u);
      EXPECT_EQ(g.combine_slot_bytes() % 16, 0u);
      // A combine row (BF16 or LogFMT) staged for the proxy fits the dispatch slot it is staged in.
      EXPECT_LE(g.combine_slot_bytes(), g.msg_bytes());
      EXPECT_EQ(g.combine_values_off(0, 0, 0), g.combine_slot_off(0, 0, 0) + kHeaderBytes);
      // A row's flag is an aligned 8-byte word of its slot's header, before the values.
      for (const int b : {0, 1})
        for (const int64_t t : {int64_t{0}, g.T - 1})
          for (const int64_t k : {int64_t{0}, int64_t{kMaxTopk - 1}}) {
            EXPECT_EQ(g.combine_row_flag_off(b, t, k) % 8, 0u);
            EXPECT_GE(g.combine_row_flag_off(b, t, k), g.combine_slot_off(b, t, k));
            EXPECT_LE(g.combine_row_flag_off(b, t, k) + 8, g.combine_values_off(b, t, k));
            // send_balanced finds the flag from the values' address.
            EXPECT_EQ(g.combine_row_flag_off(b, t, k), g.combine_values_off(b, t, k) - kHeaderBytes);
          }
    }
}

// The home rank waits for a row flag's exact value: a zeroed header (after clean) is no call's
// flag, every call's flag differs from the calls' before it, and the low word is the epoch.
TEST(LLLayout, RowFlagsNeverMatchZeroOrAnotherCall) {
  const uint32_t epochs[] = {0u, 1u, 2u, 1000u, ~kRowFlagCheck, kRowFlagCheck, 0x7fffffffu, 0xffffffffu};
  for (const uint32_t e : epochs) {
    EXPECT_NE(combine_row_flag(e), 0u) << "epoch " << e;
    EXPECT_EQ(static_cast<uint32_t>(combine_row_flag(e)), e);
    for (const uint32_t f : epochs) {
      if (f != e) {
        EXPECT_NE(combine_row_flag(e), combine_row_flag(f)) << e << " vs " << f;
      }
    }
  }
}

// Every top-k entry of every token gets its own message slot on its owner, below T x C: random
// rows of distinct experts (and -1 holes), at shapes where C is capped (L > 16) and where it is L.
TEST(LLLayout, MessageSlotsOfATokenAreDistinctAndInRange) {
  uint64_t seed = 12345;
  auto next = [&seed] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (const Layout g : {Layout{16, 128, 2, 288, true}, Layout{16, 128, 4, 24, true}, Layout{16, 128, 8, 8, true}}) {
    const int64_t L = g.L(), C = g.slots_per_token();
    for (int K : {1, 4, 8, 16}) {
      if (K > g.E) continue;
      for (int64_t t = 0; t < g.T; ++t) {
        std::vector<int64_t> row;
        while (static_cast<int>(row.size()) < K) {
          const int64_t e = static_cast<int64_t>(next() % g.E);
          if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
        }
        if (next() % 4 == 0) row[next() % K] = -1;  // a dropped entry
        std::vector<std::vector<int64_t>> used(g.R);
        for (int k = 0; k < K; ++k) {
          if (row[k] < 0) continue;
          const int64_t m = t * C + msg_slot_in_token(row.data(), k, L, g.E);
          ASSERT_LT(m, g.T * C) << "K " << K << " t " << t << " k " << k;
          auto& u = used[row[k] / L];
          ASSERT_EQ(std::find(u.begin(), u.end(), m), u.end()) << "two entries share message " << m;
          u.push_back(m);
        }
      }
    }
  }
  // A duplicate expert is what can overflow a rank's C slots (the sender reports it).
  const Layout g{16, 128, 8, 8, true};  // L = 1, C = 1
  const int64_t dup[2] = {3, 3};
  EXPECT_EQ(msg_slot_in_token(dup, 1, g.L(), g.E), 1);
  EXPECT_EQ(g.slots_per_token(), 1);
}

// The balanced combine send's bookkeeping, replayed on the host: every row goes to exactly one
// block, each row maps to the pair that holds it (pairs without rows are skipped), and, whatever
// order the blocks add their rows in, exactly one add completes each pair (that block stores the
// flag), with the per-pair total equal to the pair's rows.
TEST(LLLayout, CombineSendSharesCoverEveryRowOnceAndCompleteEachPairOnce) {
  std::mt19937 rng(7);
  for (const int P : {1, 2, 5, 288, 4096}) {
    for (const int blocks : {1, 3, 132}) {
      std::vector<int> count(P), first(P + 1, 0);
      for (int p = 0; p < P; ++p) {
        count[p] = rng() % 3 == 0 ? 0 : static_cast<int>(rng() % 9);  // many pairs without rows
        first[p + 1] = first[p] + count[p];
      }
      const int N = first[P];
      std::vector<int> owner(N, -1), done(P, 0), completions(P, 0);
      std::vector<int> order(blocks);
      for (int b = 0; b < blocks; ++b) order[b] = b;
      std::shuffle(order.begin(), order.end(), rng);
      for (const int b : order) {
        const int i0 = share_begin(N, b, blocks), i1 = share_begin(N, b + 1, blocks);
        ASSERT_LE(i0, i1);
        for (int i = i0; i < i1; ++i) {
          ASSERT_EQ(owner[i], -1) << "row " << i << " in two shares";
          owner[i] = b;
          const int p = pair_of_row(first.data(), P, i);
          ASSERT_TRUE(first[p] <= i && i < first[p + 1]) << "row " << i << " mapped to pair " << p;
        }
        if (i0 == i1) continue;
        for (int p = pair_of_row(first.data(), P, i0); p <= pair_of_row(first.data(), P, i1 - 1); ++p) {
          if (count[p] == 0) continue;
          const int mine = std::min(first[p + 1], i1) - std::max(first[p], i0);
          ASSERT_GT(mine, 0) << "pair " << p << " counted by block " << b << " without rows there";
          const int before = done[p];
          done[p] += mine;
          if (before + mine == count[p]) ++completions[p];
        }
      }
      for (int i = 0; i < N; ++i) ASSERT_NE(owner[i], -1) << "row " << i << " in no share";
      for (int p = 0; p < P; ++p) {
        EXPECT_EQ(done[p], count[p]) << "pair " << p << " (P " << P << ", blocks " << blocks << ")";
        EXPECT_EQ(completions[p], count[p] > 0 ? 1 : 0) << "pair " << p;
      }
      const int per_block = (N + blocks - 1) / blocks;
      for (int b = 0; b < blocks; ++b)  // equal shares: within one row of each other
        EXPECT_GE(share_begin(N, b + 1, blocks) - share_begin(N, b, blocks), per_block - 1);
    }
  }
}

TEST(LLLayout, UnsupportedShapesNameTheProblem) {
  EXPECT_EQ(layout_unsupported(Layout{128, 7168, 2, 288}), nullptr);
  EXPECT_NE(std::string(layout_unsupported(Layout{128, 100, 2, 288})).find("hidden"), std::string::npos);
  EXPECT_NE(std::string(layout_unsupported(Layout{128, 32768, 2, 288})).find("hidden"), std::string::npos);
  EXPECT_NE(std::string(layout_unsupported(Layout{128, 7168, 2, 287})).find("num_experts"), std::string::npos);
  EXPECT_NE(std::string(layout_unsupported(Layout{0, 7168, 2, 288})).find("tokens"), std::string::npos);
  EXPECT_NE(std::string(layout_unsupported(Layout{128, 7168, 2, 2 * kMaxExperts})).find("num_experts"),
            std::string::npos);
}

// Signals sit at the same offsets whatever the shape: a later call with another expert count
// must not read an earlier shape's payload bytes as counts or flags.
TEST(LLLayout, SignalsDoNotMoveWithTheShape) {
  const Layout a{64, 2048, 2, 12}, b{128, 7168, 2, 288};
  EXPECT_EQ(a.signal_bytes(), b.signal_bytes());
  EXPECT_EQ(a.dispatch_count_off(1, 3, 1), b.dispatch_count_off(1, 3, 1));
  EXPECT_EQ(a.combine_flag_off(1, 11), b.combine_flag_off(1, 11));
  const Layout big{8, 128, 2, kMaxExperts};
  EXPECT_LE(big.combine_flag_off(1, big.E - 1) + 4, big.signal_bytes());
  EXPECT_LE(big.dispatch_count_off(1, big.L() - 1, big.R - 1) + 4, big.combine_flag_off(0, 0));
}

// The receive addresses a (local expert, source) pair by its index p = l*R + r: the same count and
// region as by (l, r), for every pair of both halves (the region as ((b*L + l)*R + r) * T * M).
TEST(LLLayout, OffsetsByPairIndexMatchOffsetsByExpertAndSource) {
  for (const Layout& g :
       {Layout{128, 7168, 1, 288}, Layout{128, 7168, 2, 288}, Layout{7, 256, 3, 12}, Layout{16, 512, 8, 64}}) {
    for (int b = 0; b < 2; ++b)
      for (int64_t l = 0; l < g.L(); ++l)
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t p = l * g.R + r;
          EXPECT_EQ(Layout::dispatch_count_off_at(b, p), g.dispatch_count_off(b, l, r));
          const uint64_t region = g.signal_bytes() + static_cast<uint64_t>((b * g.L() + l) * g.R + r) *
                                                         static_cast<uint64_t>(g.T) * g.msg_bytes();
          EXPECT_EQ(g.dispatch_region_off(b, p), region) << "R " << g.R << " E " << g.E << " b " << b << " p " << p;
          EXPECT_EQ(g.dispatch_slot_off(b, l, r, 3), region + 3 * g.msg_bytes());
        }
  }
}

// Proxy fence groups: one tag per (kind, half, local expert), all distinct and inside the range the
// proxy is configured with; proxy counters reuse the signal numbering and stay inside kNumCounters.
TEST(LLLayout, ProxyTagsAndCountersAreDistinctAndInRange) {
  for (const int64_t R : {2, 3, 8, 64}) {
    const Layout g{8, 128, R, (kMaxExperts / R) * R};
    std::vector<bool> seen(static_cast<size_t>(num_proxy_tags(R)), false);
    for (int kind : {kTagDispatch, kTagCombine})
      for (int b = 0; b < 2; ++b)
        for (int64_t l = 0; l < g.L(); ++l) {
          const uint32_t t = proxy_tag(kind, b, l, R);
          ASSERT_LT(t, seen.size()) << "R " << R << " kind " << kind << " b " << b << " l " << l;
          EXPECT_FALSE(seen[t]) << "tag " << t << " used twice";
          seen[t] = true;
        }
    EXPECT_LE(num_proxy_tags(R), 16384) << "the proxy's immediate carries 14-bit tags";
    EXPECT_LT(counter_of(g.combine_flag_off(1, g.E - 1)), static_cast<uint32_t>(kNumResetCounters));
    EXPECT_NE(counter_of(g.dispatch_count_off(1, g.L() - 1, R - 1)), counter_of(g.combine_flag_off(0, 0)));
    // Barrier words: after every count and flag (clean resets those, not these), inside the area.
    EXPECT_EQ(counter_of(Layout::barrier_off(0)), static_cast<uint32_t>(kNumResetCounters));
    EXPECT_LT(counter_of(Layout::barrier_off(R - 1)), static_cast<uint32_t>(kNumCounters));
    EXPECT_LE(Layout::barrier_off(kMaxExperts - 1) + 4, g.signal_bytes());
    EXPECT_EQ(Layout::reset_signal_bytes(), Layout::barrier_off(0));
  }
}

// The handle's storage: src_info plane (the [L, R*T] view callers see) first, then the top-k plane,
// then the tail whose first word is the dispatch's buffer half.
TEST(LLLayout, HandlePlanesThenTail) {
  const Layout g{128, 7168, 2, 288};
  const int64_t P = g.L() * g.R * g.T;  // one entry per received row
  EXPECT_EQ(g.handle_plane_ints(), P);
  EXPECT_EQ(g.handle_src_info_off(), 0);
  EXPECT_EQ(g.handle_src_topk_off(), P);
  EXPECT_EQ(g.handle_half_off(), 2 * P);
  EXPECT_EQ(g.handle_ints(), 2 * P + kHandleTail);
  EXPECT_GE(kHandleTail, 1);  // room for the buffer half
}

}  // namespace
}  // namespace anyep::ll
