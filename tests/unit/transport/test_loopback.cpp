// Loopback backend: bytes land, immediates carry the right source, bad input is rejected.
#include <gtest/gtest.h>

#include "common/error.h"
#include "transport/loopback/loopback_transport.h"

namespace anyep::transport {
namespace {

struct Pair {
  std::shared_ptr<loopback::Fabric> fabric = loopback::make_fabric(2);
  std::unique_ptr<Transport> t0 = loopback::make_endpoint(fabric, 0);
  std::unique_ptr<Transport> t1 = loopback::make_endpoint(fabric, 1);
  std::vector<uint8_t> src = std::vector<uint8_t>(256), dst = std::vector<uint8_t>(256, 0);
  MrId s = 0, d = 0;
  Pair() {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
    s = t0->register_memory(src.data(), src.size(), MemKind::kHost);
    d = t1->register_memory(dst.data(), dst.size(), MemKind::kHost);
    std::vector<std::vector<uint8_t>> addrs{t0->local_address(), t1->local_address()};
    t0->connect(addrs);
    t1->connect(addrs);
    t0->import_mr(1, d, t1->export_mr(d));
  }
};

TEST(Loopback, WriteLandsAndImmediateNamesTheSource) {
  Pair p;
  ASSERT_EQ(p.t0->post_write({1, p.s, 16, p.d, 32, 100, true, 0xabcdef01u, 77}), 0) << p.t0->last_error();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(p.dst[32 + i], p.src[16 + i]);
  EXPECT_EQ(p.dst[31], 0);
  EXPECT_EQ(p.dst[132], 0);
  Completion c[4];
  ImmEvent im[4];
  size_t nc = 0, ni = 0;
  ASSERT_EQ(p.t0->poll(c, 4, &nc, im, 4, &ni), 0);
  ASSERT_EQ(nc, 1u);
  EXPECT_EQ(c[0].context, 77u);
  EXPECT_EQ(c[0].status, 0);
  EXPECT_EQ(ni, 0u);
  ASSERT_EQ(p.t1->poll(c, 4, &nc, im, 4, &ni), 0);
  ASSERT_EQ(ni, 1u);
  EXPECT_EQ(im[0].src_rank, 0u);
  EXPECT_EQ(im[0].imm, 0xabcdef01u);
  EXPECT_TRUE(p.t0->capabilities().ordered_writes);
}

TEST(Loopback, BadInputIsRejectedBeforeAnythingMoves) {
  Pair p;
  EXPECT_EQ(p.t0->post_write({5, p.s, 0, p.d, 0, 8, false, 0, 0}), -EINVAL);
  EXPECT_NE(p.t0->last_error().find("unknown peer rank 5"), std::string::npos) << p.t0->last_error();
  EXPECT_EQ(p.t0->post_write({1, p.s, 0, p.d, 250, 8, false, 0, 0}), -EINVAL);
  EXPECT_NE(p.t0->last_error().find("destination"), std::string::npos) << p.t0->last_error();
  EXPECT_EQ(p.t0->post_write({1, 9, 0, p.d, 0, 8, false, 0, 0}), -EINVAL);
  EXPECT_NE(p.t0->last_error().find("source region 9 is not registered"), std::string::npos) << p.t0->last_error();
  EXPECT_EQ(p.t0->post_imm(2, 1, 0), -EINVAL);
  for (uint8_t b : p.dst) EXPECT_EQ(b, 0);
  Completion c[4];
  ImmEvent im[4];
  size_t nc = 0, ni = 0;
  ASSERT_EQ(p.t1->poll(c, 4, &nc, im, 4, &ni), 0);
  EXPECT_EQ(ni, 0u);
  EXPECT_THROW(p.t0->register_memory(p.src.data(), 8, MemKind::kCuda), Unsupported);
}

}  // namespace
}  // namespace anyep::transport
