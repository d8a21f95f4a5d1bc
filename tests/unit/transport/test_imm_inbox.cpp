// anyep/tests/unit/transport/test_imm_inbox.cpp — the cuda-ipc immediate inbox on the CPU (no GPU
// needed): capacity, wrap-around, per-source rings, a producer thread against a consumer, and
// the segment's lifetime.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "common/error.h"
#include "transport/cuda_ipc/imm_inbox.h"

using namespace anyep;
using namespace anyep::transport;
using namespace anyep::transport::cuda_ipc;

namespace {

std::string test_name(const char* what) { return "/anyep-inbox-test-" + std::to_string(getpid()) + "-" + what; }

TEST(ImmInbox, FullRingRefusesUntilDrainedAndWrapsAround) {
  ImmInbox owner = ImmInbox::create(test_name("wrap"), 3, 8);
  ImmInbox peer = ImmInbox::attach(owner.name(), 3, 8);
  ImmEvent out[16];
  uint32_t next_push = 0, next_pop = 0;
  for (int round = 0; round < 5; ++round) {  // 5 x 8 pushes: wraps the 8-slot ring several times
    while (peer.push(2, next_push)) ++next_push;
    EXPECT_EQ(next_push - next_pop, 8u) << "a ring holds exactly `slots` immediates";
    size_t n = owner.drain(out, 16);
    ASSERT_EQ(n, 8u);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(out[i].src_rank, 2u);
      EXPECT_EQ(out[i].imm, next_pop++);
    }
  }
  EXPECT_EQ(owner.drain(out, 16), 0u);
}

TEST(ImmInbox, EachSourceHasItsOwnRingAndDrainRespectsMax) {
  ImmInbox owner = ImmInbox::create(test_name("sources"), 4, 4);
  ImmInbox p1 = ImmInbox::attach(owner.name(), 4, 4), p3 = ImmInbox::attach(owner.name(), 4, 4);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(p1.push(1, 100 + i));
    ASSERT_TRUE(p3.push(3, 300 + i));
  }
  EXPECT_FALSE(p1.push(1, 999));  // source 1's ring is full; source 0's is not
  EXPECT_TRUE(owner.push(0, 5));
  ImmEvent out[16];
  size_t total = 0, n;
  std::vector<int> got(4, 0);
  while ((n = owner.drain(out, 3)) > 0) {
    EXPECT_LE(n, 3u);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LT(out[i].src_rank, 4u);
      EXPECT_EQ(out[i].imm / 100, out[i].src_rank == 0 ? 0u : out[i].src_rank);
      ++got[out[i].src_rank];
    }
    total += n;
  }
  EXPECT_EQ(total, 9u);
  EXPECT_EQ(got, (std::vector<int>{1, 4, 0, 4}));
}

TEST(ImmInbox, ProducerThreadAgainstConsumerDeliversEachOnceInOrder) {
  ImmInbox owner = ImmInbox::create(test_name("threads"), 2, 16);
  ImmInbox peer = ImmInbox::attach(owner.name(), 2, 16);
  constexpr uint32_t kN = 200000;
  std::thread producer([&] {
    for (uint32_t i = 0; i < kN;)
      if (peer.push(1, i)) ++i;
  });
  uint32_t expect = 0;
  ImmEvent out[8];
  while (expect < kN) {
    size_t n = owner.drain(out, 8);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i].imm, expect++);
  }
  producer.join();
}

TEST(ImmInbox, SegmentIsUnlinkedByItsOwnerAndChecked) {
  std::string name = test_name("life");
  {
    ImmInbox owner = ImmInbox::create(name, 2, 8);
    EXPECT_THROW(ImmInbox::create(name, 2, 8), TransportError);  // exists already
    EXPECT_THROW(ImmInbox::attach(name, 3, 8), TransportError);  // announced for another size
    EXPECT_THROW(ImmInbox::create(test_name("npot"), 2, 6), InvalidArgument);
  }
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  EXPECT_LT(fd, 0) << "the owner unlinks its segment";
  if (fd >= 0) close(fd);
  EXPECT_THROW(ImmInbox::attach(name, 2, 8), TransportError);
}

}  // namespace
