// The internode path's row and region sizes (runtime/ht/internode_plan.h): what the exchange
// carries per row in each stage, and the region the C API allocates for the worst case.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
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

// The shapes an internode dispatch's tables are sized by, checked before the pass starts.
TEST(HtInternodePlan, RowsComeFromXScalesAndTopk) {
  using namespace anyep::runtime;
  const TensorRef x = contiguous_ref(nullptr, DType::kFloat8_e4m3fn, {6, 7168}, 0);
  const TensorRef scales = contiguous_ref(nullptr, DType::kFloat32, {6, 56}, 0);
  const TensorRef topk = contiguous_ref(nullptr, DType::kInt64, {6, 8}, 0);
  const HTInternodeRows r = ht_internode_rows(x, scales, topk);
  EXPECT_EQ(r.hidden, 7168);
  EXPECT_EQ(r.x_dtype, DType::kFloat8_e4m3fn);
  EXPECT_EQ(r.scale_dtype, DType::kFloat32);
  EXPECT_EQ(r.scale_cols, 56);
  EXPECT_EQ(ht_internode_rows(contiguous_ref(nullptr, DType::kBFloat16, {6, 7168}, 0), TensorRef(), topk).scale_cols,
            0);
  const auto message = [](const auto& fn) {
    try {
      fn();
    } catch (const anyep::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidArgument");
  };
  const TensorRef x1 = contiguous_ref(nullptr, DType::kBFloat16, {6}, 0);
  EXPECT_NE(message([&] { ht_internode_rows(x1, TensorRef(), topk); }).find("x must be 2-D"), std::string::npos);
  const TensorRef short_topk = contiguous_ref(nullptr, DType::kInt64, {5, 8}, 0);
  EXPECT_NE(message([&] { ht_internode_rows(x, scales, short_topk); }).find("topk_idx must be [6, num_topk]"),
            std::string::npos);
  const TensorRef flat_scales = contiguous_ref(nullptr, DType::kFloat32, {6 * 56}, 0);
  EXPECT_NE(message([&] { ht_internode_rows(x, flat_scales, topk); }).find("x_scales must be 2-D"), std::string::npos);

  HTConfig cfg;  // 20 SMs: 10 channels
  EXPECT_GT(ht_internode_node_channels(r, 8, 4, cfg), 0);
  cfg.num_sms = 3;
  EXPECT_NE(message([&] { ht_internode_node_channels(r, 8, 4, cfg); }).find("the config"), std::string::npos);
}

}  // namespace
