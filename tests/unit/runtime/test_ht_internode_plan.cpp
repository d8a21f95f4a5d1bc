// The internode path's row and region sizes (runtime/ht/internode_plan.h): what the exchange
// carries per row in each stage, and the region the C API allocates for the worst case.
#include <gtest/gtest.h>

#include "kernels/ht/internode_protocol.h"
#include "runtime/ht/internode_plan.h"

namespace {

using anyep::runtime::DType;
using anyep::runtime::HTInternodeRows;

HTInternodeRows bf16(int64_t hidden) {
  HTInternodeRows r;
  r.hidden = hidden;
  return r;
}

TEST(HtInternodePlan, RowsCarryTheirStageInSixteenByteUnits) {
  using namespace anyep::runtime;
  // DeepEP's shape: hidden 7168, top-8.
  EXPECT_EQ(ht_route_row_bytes(8), 64u);                    // 8 int64 ids
  EXPECT_EQ(ht_route_row_bytes(3), 32u);                    // 24 bytes, padded
  EXPECT_EQ(ht_dispatch_row_bytes(bf16(7168), 8), 14368u);  // 2 H + 4 K
  EXPECT_EQ(ht_combine_row_bytes(bf16(7168), 8), 14368u);   // BF16 row + float weights
  HTInternodeRows fp8 = bf16(7168);
  fp8.x_dtype = DType::kFloat8_e4m3fn;
  fp8.scale_dtype = DType::kFloat32;
  fp8.scale_cols = 56;
  EXPECT_EQ(ht_dispatch_row_bytes(fp8, 8), 7168u + 224u + 32u);
  EXPECT_EQ(ht_dispatch_row_bytes(fp8, 0), 7168u + 224u);  // a cached dispatch: no weights
  EXPECT_EQ(ht_combine_row_bytes(fp8, 8), 14368u);         // combine is BF16 whatever x was
  for (int64_t k = 0; k <= 16; ++k) EXPECT_EQ(ht_dispatch_row_bytes(bf16(128 + 8), k) % 16, 0u) << k;
}

TEST(HtInternodePlan, RegionHoldsEveryTokenToEveryNodeAtTheWidestRow) {
  using namespace anyep::runtime;
  namespace in = anyep::ht::internode;
  for (int nodes : {2, 3, 8}) {
    const int64_t T = 4096;
    const int64_t bytes = ht_internode_region_bytes(bf16(7168), T, nodes);
    const in::Exchange ex{static_cast<uint64_t>(bytes), nodes};
    // Top-16 is the widest row any pass of this shape uses (dispatch and combine alike).
    EXPECT_GE(ex.row_capacity(ht_dispatch_row_bytes(bf16(7168), 16)), T) << nodes;
    EXPECT_GE(ex.row_capacity(ht_combine_row_bytes(bf16(7168), 16)), T) << nodes;
    EXPECT_GE(ex.row_capacity(ht_route_row_bytes(16)), T) << nodes;
    // Not more than a block's rounding above that.
    const in::Exchange smaller{static_cast<uint64_t>(bytes) - 2 * 16 * static_cast<uint64_t>(nodes), nodes};
    EXPECT_LT(smaller.row_capacity(ht_dispatch_row_bytes(bf16(7168), 16)), T) << nodes;
  }
}

}  // namespace
