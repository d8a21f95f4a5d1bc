#include <gtest/gtest.h>

#include "channel/channel.h"

using namespace anyep;
using namespace anyep::channel;

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

// Indices keep growing past the capacity; slots are reused in order; done(i) flips exactly when
// the consumer retires command i, never earlier.
TEST(Ring, IndexWrapsOverSlotsManyTimes) {
  Channel ch({.num_rings = 1, .capacity = 4});
  RingHandle p = ch.producer(0);
  RingConsumer& c = ch.consumer(0);
  TransferCmd out;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(p.push(make_nop(i * 7)), i);
    if (i % 3 == 2) {  // keep up to 3 in flight, retire in bursts
      for (uint64_t k = i - 2; k <= i; ++k) {
        ASSERT_TRUE(c.poll(&out));
        EXPECT_EQ(out.hi, k * 7);
        EXPECT_FALSE(p.done(k));
        c.pop();
        EXPECT_TRUE(p.done(k));
        EXPECT_FALSE(p.done(k + 1));
      }
    }
  }
  EXPECT_EQ(c.tail(), 999u);
  ASSERT_TRUE(c.poll(&out));
  EXPECT_EQ(out.hi, 999u * 7);
}

TEST(Ring, PeekAndPollBatchSeeOnlyPublishedRun) {
  Channel ch({.num_rings = 1, .capacity = 8});
  RingHandle p = ch.producer(0);
  RingConsumer& c = ch.consumer(0);
  TransferCmd buf[16];
  EXPECT_EQ(c.poll_batch(buf, 16), 0u);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(p.push(make_nop(100 + i)), i);
  // A full ring: poll_batch stops at capacity and returns the commands in index order.
  ASSERT_EQ(c.poll_batch(buf, 16), 8u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(buf[i].hi, 100 + i);
  TransferCmd out;
  ASSERT_TRUE(c.peek(5, &out));
  EXPECT_EQ(out.hi, 105u);
  EXPECT_FALSE(c.peek(8, &out));  // one lap ahead: that index cannot be published yet
  c.pop(5);
  EXPECT_EQ(c.poll_batch(buf, 16), 3u);
  EXPECT_EQ(buf[0].hi, 105u);
  EXPECT_FALSE(c.peek(3, &out));  // index 8 is not published yet
  EXPECT_TRUE(p.done(4));
  EXPECT_FALSE(p.done(5));
  // A hole (index claimed, not yet written) stops the batch even if later slots are published:
  // simulate by publishing index 9 directly before index 8.
  const uint64_t nine = 9;
  EXPECT_EQ(p.publish(nine, make_nop(109)), nine);
  EXPECT_EQ(c.poll_batch(buf, 16), 3u);  // 5, 6, 7 — stops at the hole at 8
  c.pop(3);
  EXPECT_FALSE(c.poll(&out));
  EXPECT_EQ(p.publish(8, make_nop(108)), 8u);
  ASSERT_EQ(c.poll_batch(buf, 16), 2u);
  EXPECT_EQ(buf[0].hi, 108u);
  EXPECT_EQ(buf[1].hi, 109u);
}

TEST(Ring, CachedTailOnlyReadWhenFull) {
  // After the consumer frees slots, the producer's cached tail lags; a push that fits by the
  // cache must not need the host tail, a push that looks full must refresh it.
  Channel ch({.num_rings = 1, .capacity = 2, .timeout_ns = 1'000'000'000});
  RingHandle p = ch.producer(0);
  RingConsumer& c = ch.consumer(0);
  ASSERT_EQ(p.push(make_nop(0)), 0u);
  ASSERT_EQ(p.push(make_nop(1)), 1u);
  EXPECT_EQ(__atomic_load_n(p.cached_tail, __ATOMIC_RELAXED), 0u);
  c.pop(2);
  ASSERT_EQ(p.push(make_nop(2)), 2u);  // looked full (2 - 0 >= 2): refreshed to tail 2
  EXPECT_EQ(__atomic_load_n(p.cached_tail, __ATOMIC_RELAXED), 2u);
  ASSERT_EQ(p.push(make_nop(3)), 3u);  // fits by the cache
  EXPECT_EQ(__atomic_load_n(p.cached_tail, __ATOMIC_RELAXED), 2u);
}

TEST(Ring, PushTimeoutFillsErrorRecordAndCheckErrorsNamesRingAndIndex) {
  Channel ch({.num_rings = 3, .capacity = 2, .timeout_ns = 20'000'000});  // 20 ms
  EXPECT_NO_THROW(ch.check_errors());
  RingHandle p = ch.producer(1);
  ASSERT_EQ(p.push(make_nop()), 0u);
  ASSERT_EQ(p.push(make_nop()), 1u);
  const uint64_t t0 = port::now_ns();
  EXPECT_EQ(p.push(make_nop()), kPushFailed);  // nobody consumes ring 1
  EXPECT_GE(port::now_ns() - t0, 20'000'000u);
  EXPECT_EQ(p.shared->error.code, kRingErrorPushTimeout);
  EXPECT_EQ(p.shared->error.ring_id, 1u);
  EXPECT_EQ(p.shared->error.index, 2u);
  EXPECT_EQ(p.shared->error.observed_tail, 0u);
  try {
    ch.check_errors();
    FAIL() << "check_errors did not throw";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ring 1"), std::string::npos) << m;
    EXPECT_NE(m.find("index 2"), std::string::npos) << m;
    EXPECT_NE(m.find("20 ms"), std::string::npos) << m;
    EXPECT_NE(m.find("free slot"), std::string::npos) << m;
  }
}

TEST(Ring, WaitDoneTimeoutIsReportedAsSuch) {
  Channel ch({.num_rings = 2, .capacity = 4, .timeout_ns = 5'000'000});
  RingHandle p = ch.producer(0);
  const uint64_t i = p.push(make_nop());
  EXPECT_FALSE(p.wait_done(i));
  try {
    ch.check_errors();
    FAIL() << "check_errors did not throw";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ring 0"), std::string::npos) << m;
    EXPECT_NE(m.find("retire index 0"), std::string::npos) << m;
  }
  ch.consumer(0).pop();
  EXPECT_TRUE(p.wait_done(i));
}

TEST(Ring, SmallCapacitiesKeepSharedStateAligned) {
  // capacity 2 -> 32 bytes of slots: RingShared must still start on a cache line (UBSan checks
  // the accesses below for alignment in the asan build).
  for (uint32_t cap : {2u, 4u, 8u}) {
    Channel ch({.num_rings = 3, .capacity = cap});
    for (uint32_t r = 0; r < 3; ++r) {
      RingHandle p = ch.producer(r);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p.shared) % 64, 0u) << "capacity " << cap << " ring " << r;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p.slots) % 64, 0u);
      ASSERT_EQ(p.push(make_nop(r)), 0u);
      TransferCmd out;
      ASSERT_TRUE(ch.consumer(r).poll(&out));
      EXPECT_EQ(out.hi, r);
      ch.consumer(r).pop();
      EXPECT_TRUE(p.done(0));
    }
    EXPECT_NO_THROW(ch.check_errors());
  }
}

static std::string config_error(const ChannelConfig& cfg) {
  try {
    Channel ch(cfg);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ChannelConfig, BadValuesRejectedWithClearMessages) {
  EXPECT_NE(config_error({.num_rings = 0}).find("num_rings"), std::string::npos);
  EXPECT_NE(config_error({.num_rings = kMaxRings + 1}).find("num_rings"), std::string::npos);
  for (uint32_t cap : {0u, 1u, 3u, 1000u, kMaxRingCapacity * 2}) {
    const std::string m = config_error({.capacity = cap});
    EXPECT_NE(m.find("capacity"), std::string::npos) << m;
    EXPECT_NE(m.find("(got " + std::to_string(cap) + ")"), std::string::npos) << m;
  }
  EXPECT_NE(config_error({.timeout_ns = 0}).find("timeout_ns"), std::string::npos);
  EXPECT_NE(config_error({.producer = static_cast<ProducerKind>(7)}).find("producer"), std::string::npos);
  EXPECT_NE(config_error({.producer = ProducerKind::kGpu, .cuda_device = -1}).find("cuda_device"), std::string::npos);
  EXPECT_EQ(config_error({.num_rings = 2, .capacity = 2, .timeout_ns = 1}), "(accepted)");
  Channel ch({.num_rings = 2});
  EXPECT_THROW(ch.producer(2), InvalidArgument);
  EXPECT_THROW(ch.consumer(2), InvalidArgument);
#if !ANYEP_WITH_GPU
  EXPECT_THROW(Channel({.producer = ProducerKind::kGpu}), Unsupported);
#endif
}
