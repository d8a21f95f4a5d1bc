// runtime::HTNet refuses what it cannot serve before it touches the GPU, naming the field: ranks
// that do not form whole nodes, and a num_rdma_bytes with no room for a block.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "runtime/ht/net.h"

namespace {

using anyep::runtime::HTNet;

template <typename E, typename F>
void expect_error(F f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << text << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(HtNet, RefusesRanksThatAreNotWholeNodes) {
  expect_error<anyep::Unsupported>([] { HTNet(0, 6, 4, 1 << 20); }, "6 ranks as nodes of 4");
  expect_error<anyep::InvalidArgument>([] { HTNet(6, 6, 2, 1 << 20); }, "rank 6 out of range");
}

TEST(HtNet, RefusesARegionWithNoRoomForABlock) {
  expect_error<anyep::InvalidArgument>([] { HTNet(0, 2, 1, 4096); }, "num_rdma_bytes=4096");
}

}  // namespace
