#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "proxy/symmetric_memory.h"

using namespace anyep;
using namespace anyep::proxy;

TEST(SymmetricMemory, TranslatesAndBoundsChecks) {
  std::vector<uint8_t> a(1000), b(4096);
  SymmetricMemory m({{"a", a.data(), a.size()}, {"b", b.data(), b.size()}});
  EXPECT_EQ(m.start(1), 1008u) << "regions start on 16-byte boundaries";
  RegionOffset w;
  ASSERT_TRUE(m.translate(0, 1000, &w));
  EXPECT_EQ(w.region, 0u);
  EXPECT_FALSE(m.translate(992, 16, &w)) << "crosses the end of region a";
  EXPECT_FALSE(m.translate(1000, 8, &w)) << "in the padding between regions";
  ASSERT_TRUE(m.translate(1008 + 4080, 16, &w));
  EXPECT_EQ(w.region, 1u);
  EXPECT_EQ(w.offset, 4080u);
  EXPECT_FALSE(m.translate(1008 + 4080, 32, &w)) << "past the last region";
  EXPECT_FALSE(m.translate(~0ull - 8, 16, &w)) << "no overflow on huge offsets";
  EXPECT_NE(m.describe().find("'b' [1008, 5104)"), std::string::npos) << m.describe();
}

TEST(SymmetricMemory, RejectsBadRegions) {
  EXPECT_THROW(SymmetricMemory({}), InvalidArgument);
  EXPECT_THROW(SymmetricMemory({{"x", nullptr, 16}}), InvalidArgument);
}
