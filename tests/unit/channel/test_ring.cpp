#include <gtest/gtest.h>

#include "channel/channel.h"

using namespace anyep;

TEST(Ring, PushPollPop) {
  Channel ch({.num_rings = 1, .capacity = 4});
  RingHandle p = ch.producer(0);
  RingConsumer& c = ch.consumer(0);
  TransferCmd out;
  EXPECT_FALSE(c.poll(&out));
  EXPECT_EQ(p.push(make_nop(11)), 0u);
  EXPECT_EQ(p.push(make_nop(12)), 1u);
  ASSERT_TRUE(c.poll(&out));
  EXPECT_EQ(out.hi, 11u);
  ASSERT_TRUE(c.poll(&out));  // poll does not consume
  EXPECT_EQ(out.hi, 11u);
  EXPECT_FALSE(p.done(0));
  c.pop();
  EXPECT_TRUE(p.done(0));
  EXPECT_FALSE(p.done(1));
  ASSERT_TRUE(c.poll(&out));
  EXPECT_EQ(out.hi, 12u);
}
