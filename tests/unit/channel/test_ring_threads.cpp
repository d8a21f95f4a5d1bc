// Concurrency of the ring on the host: many producer threads, one consumer thread per ring,
// backpressure and done() across threads. Runs clean under TSan (.ci/run).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "channel/channel.h"

using namespace anyep;
using namespace anyep::channel;

namespace {
// Payload of a stress command: who pushed it and its sequence number within (producer, ring).
uint64_t payload(uint32_t producer, uint64_t seq) { return (uint64_t{producer} << 40) | seq; }
uint32_t payload_producer(uint64_t v) { return static_cast<uint32_t>(v >> 40); }
uint64_t payload_seq(uint64_t v) { return v & ((1ull << 40) - 1); }
}  // namespace

// P producers each push N commands into every one of R rings (interleaving rings); one consumer
// thread per ring checks that each producer's commands arrive exactly once and in push order.
TEST(RingThreads, ManyProducersManyRingsNothingLostNothingDuplicatedOrderKept) {
  constexpr uint32_t kRings = 3, kProducers = 6;
  constexpr uint64_t kPerRing = 2000;  // per producer and ring
  // A small capacity makes the full-ring path (cached tail refresh, waits) common.
  Channel ch({.num_rings = kRings, .capacity = 16, .timeout_ns = 30'000'000'000});
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kRings);
  std::vector<uint64_t> received(kRings, 0);
  for (uint32_t r = 0; r < kRings; ++r) {
    threads.emplace_back([&, r] {
      RingConsumer& c = ch.consumer(r);
      std::vector<uint64_t> next(kProducers, 0);  // next expected seq of each producer
      TransferCmd batch[8];
      const uint64_t want = kProducers * kPerRing;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (received[r] < want) {
        const uint32_t n = c.poll_batch(batch, 8);
        for (uint32_t k = 0; k < n; ++k) {
          const uint32_t prod = payload_producer(batch[k].hi);
          const uint64_t seq = payload_seq(batch[k].hi);
          if (cmd_op(batch[k]) != Op::kNop || prod >= kProducers || seq != next[prod]) {
            if (failures[r].empty())
              failures[r] = "ring " + std::to_string(r) + ": command " + std::to_string(c.tail() + k) +
                            " from producer " + std::to_string(prod) + " has seq " + std::to_string(seq) +
                            ", expected " + (prod < kProducers ? std::to_string(next[prod]) : "?");
          } else {
            ++next[prod];
          }
        }
        c.pop(n);
        received[r] += n;
        if (n == 0) std::this_thread::yield();  // CI has 2 cores for 9 threads
        if (n == 0 && std::chrono::steady_clock::now() > deadline) {
          failures[r] = "ring " + std::to_string(r) + ": timed out after " + std::to_string(received[r]) + " commands";
          return;
        }
      }
    });
  }
  std::atomic<int> push_failures{0};
  for (uint32_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::vector<RingHandle> h;
      for (uint32_t r = 0; r < kRings; ++r) h.push_back(ch.producer(r));
      for (uint64_t s = 0; s < kPerRing; ++s)
        for (uint32_t r = 0; r < kRings; ++r) {
          // Alternate both push flavours; on the host push_warp is the one-lane warp.
          const uint64_t idx = (s & 1) ? h[(r + p) % kRings].push_warp(make_nop(payload(p, s)))
                                       : h[(r + p) % kRings].push(make_nop(payload(p, s)));
          if (idx == kPushFailed) push_failures.fetch_add(1);
        }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(push_failures.load(), 0);
  for (uint32_t r = 0; r < kRings; ++r) {
    EXPECT_TRUE(failures[r].empty()) << failures[r];
    EXPECT_EQ(received[r], kProducers * kPerRing) << "ring " << r;
    EXPECT_EQ(ch.consumer(r).tail(), kProducers * kPerRing);
    TransferCmd out;
    EXPECT_FALSE(ch.consumer(r).poll(&out)) << "ring " << r << " has commands nobody pushed";
  }
  EXPECT_NO_THROW(ch.check_errors());
}

// A full ring blocks the producer until the consumer pops, then it resumes.
TEST(RingThreads, FullRingBlocksProducerUntilPop) {
  Channel ch({.num_rings = 1, .capacity = 4, .timeout_ns = 30'000'000'000});
  RingHandle p = ch.producer(0);
  RingConsumer& c = ch.consumer(0);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(p.push(make_nop(i)), i);
  std::atomic<bool> returned{false};
  std::atomic<uint64_t> index{0};
  std::atomic<uint64_t> blocked_ns{0};
  std::atomic<bool> started{false};
  std::thread producer([&] {
    const uint64_t t0 = port::now_ns();
    started.store(true);  // after t0: the 50 ms below all fall inside the measured wait
    index.store(p.push(make_nop(4)));
    blocked_ns.store(port::now_ns() - t0);
    returned.store(true);
  });
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load()) << "push into a full ring returned without a free slot";
  TransferCmd out;
  ASSERT_TRUE(c.poll(&out));
  EXPECT_EQ(out.hi, 0u);
  c.pop();  // frees exactly one slot: the blocked producer takes it
  producer.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(index.load(), 4u);
  EXPECT_GE(blocked_ns.load(), 50'000'000u) << "the producer did not actually wait";
  for (uint64_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(c.poll(&out));
    EXPECT_EQ(out.hi, i);
    c.pop();
  }
  EXPECT_FALSE(c.poll(&out));
  EXPECT_NO_THROW(ch.check_errors());
}

// wait_done() in a producer thread returns once (and only once) the consumer retired the index.
TEST(RingThreads, WaitDoneReturnsAfterConsumerRetires) {
  Channel ch({.num_rings = 1, .capacity = 8, .timeout_ns = 30'000'000'000});
  RingHandle p = ch.producer(0);
  const uint64_t first = p.push(make_nop(1));
  const uint64_t quiet = p.push(make_quiet());
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    EXPECT_TRUE(p.wait_done(quiet));
    done.store(true);
  });
  RingConsumer& c = ch.consumer(0);
  c.pop();  // retires `first` only
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(p.done(first));
  EXPECT_FALSE(done.load()) << "wait_done returned before its command retired";
  c.pop();
  waiter.join();
  EXPECT_TRUE(done.load());
  EXPECT_NO_THROW(ch.check_errors());
}
