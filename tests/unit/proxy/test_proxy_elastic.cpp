// Elastic mode (ProxyConfig::drop_failed_peers, used by shrink-mode LL buffers): a peer whose
// operations fail is dropped and its traffic discarded, while the other peers' traffic goes on;
// without it the same failure stops the proxy with an error naming the peer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "cluster_waits.h"
#include "common/error.h"
#include "proxy/completion_context.h"
#include "testkit/local_cluster.h"
#include "transport/forwarding_transport.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

constexpr uint32_t kDead = 1;  // the peer that "dies" in every test

// How a dead peer shows, once `dead` is set: posts to it refused (-EIO, as the cuda-ipc backend
// reports a process_vm_writev to a gone process), posts accepted but their completions failed (a
// NIC and an unreachable peer), or posts refused with -EAGAIN for ever (a peer that returns no
// signal credits, or a full send queue to it).
enum class Death { kRefused, kCompletionsFail, kBackpressure };
const char* name(Death d) {
  return d == Death::kRefused ? "posts refused" : d == Death::kCompletionsFail ? "completions fail" : "backpressure";
}

class DeadPeer final : public transport::ForwardingTransport {
 public:
  DeadPeer(std::unique_ptr<transport::Transport> inner, std::shared_ptr<std::atomic<bool>> dead, Death how)
      : ForwardingTransport(std::move(inner)), dead_(std::move(dead)), how_(how) {}
  int post_write(const transport::WriteDesc& w) override {
    if (w.dst_rank == kDead && dead_->load() && how_ != Death::kCompletionsFail) return refuse();
    return inner_->post_write(w);
  }
  int post_imm(uint32_t dst, uint32_t imm, uint64_t context) override {
    if (dst == kDead && dead_->load() && how_ != Death::kCompletionsFail) return refuse();
    return inner_->post_imm(dst, imm, context);
  }
  int poll(transport::Completion* c, size_t mc, size_t* nc, transport::ImmEvent* i, size_t mi, size_t* ni) override {
    const int rc = inner_->poll(c, mc, nc, i, mi, ni);
    if (how_ == Death::kCompletionsFail && dead_->load())
      for (size_t k = 0; k < *nc; ++k)
        if (proxy::completion::peer(c[k].context) == kDead) c[k].status = fail();
    return rc;
  }
  std::string last_error() const override { return failed_ ? "peer process is gone (test)" : inner_->last_error(); }

 private:
  int fail() {
    failed_ = true;
    return -EIO;
  }
  int refuse() { return how_ == Death::kBackpressure ? -EAGAIN : fail(); }
  std::shared_ptr<std::atomic<bool>> dead_;
  Death how_;
  bool failed_ = false;
};

struct World {
  std::shared_ptr<std::atomic<bool>> dead = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<LocalCluster> cl;
  World(bool elastic, Death how, Ordering ordering = Ordering::kAuto, uint64_t timeout_ms = 20000) {
    LocalClusterConfig c;
    c.ranks = 3;
    c.threads = 2;
    c.rings = 2;
    c.buffer_bytes = 1 << 16;
    c.num_counters = 16;
    c.proxy.num_tags = 16;
    c.proxy.ordering = ordering;
    c.proxy.timeout_ns = timeout_ms * 1000000ull;
    c.proxy.ranks_per_node = 1;
    c.proxy.drop_failed_peers = elastic;
    auto inner = loopback_factory(c.ranks, c.threads);
    auto d = dead;
    c.endpoints = [inner, d, how](uint32_t r, uint32_t t) { return std::make_unique<DeadPeer>(inner(r, t), d, how); };
    cl = std::make_unique<LocalCluster>(c);
    cl->start();
  }
};

// Rank 0 sends a round (4 writes + a count-fenced signal on counter `counter`) to ranks 1 and 2
// on ring `ring`, then a QUIET; true if the QUIET retired within the limit.
bool round_to_both(LocalCluster& cl, uint32_t ring, uint32_t counter) {
  RingHandle h = cl.rank(0).channel->producer(ring);
  for (uint32_t dst : {1u, 2u}) {
    for (int t = 0; t < 4; ++t)
      if (h.push(make_write(dst, t * 256, 8192 + t * 256, 256, 3)) == kPushFailed) return false;
    if (h.push(make_signal(dst, counter, 1, cmd::kFenceCount, 3, 4)) == kPushFailed) return false;
  }
  const uint64_t q = h.push(make_quiet());
  return q != kPushFailed && h.wait_done(q);
}

}  // namespace

TEST(ProxyElastic, FailedPostsDropThePeerAndTheOthersGoOn) {
  for (const Death how : {Death::kRefused, Death::kCompletionsFail, Death::kBackpressure}) {
    SCOPED_TRACE(name(how));
    // Backpressure is only given up on after the timeout.
    World w(/*elastic=*/true, how, Ordering::kAuto, how == Death::kBackpressure ? 300 : 20000);
    LocalCluster& cl = *w.cl;
    ASSERT_TRUE(round_to_both(cl, 0, 5));
    ASSERT_EQ(wait_counter(&cl.rank(1).counters[5], 1), 1u);
    ASSERT_EQ(wait_counter(&cl.rank(2).counters[5], 1), 1u);
    EXPECT_TRUE(cl.rank(0).proxy->dropped().list().empty());

    w.dead->store(true);
    // Both rings (both proxy threads): each round's QUIET retires, rank 2 gets every signal, the
    // proxy stays healthy and names the dropped peer and why.
    for (uint32_t round = 0; round < 3; ++round) {
      ASSERT_TRUE(round_to_both(cl, round % 2, 6)) << round;
      ASSERT_EQ(wait_counter(&cl.rank(2).counters[6], round + 1), round + 1) << round;
    }
    cl.check();
    EXPECT_EQ(cl.rank(0).proxy->dropped().list(), std::vector<uint32_t>{kDead});
    const std::string why = cl.rank(0).proxy->dropped().reason(kDead);
    EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
    EXPECT_NE(why.find(how == Death::kBackpressure ? "could not post to rank 1 for more than 300 ms"
                                                   : "peer process is gone (test)"),
              std::string::npos)
        << why;
    EXPECT_GT(cl.rank(0).proxy->stats().dropped, 0u);
    // Posts refused: nothing reached the dead peer (failed completions come after the data landed).
    if (how != Death::kCompletionsFail) {
      EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[6]), 0u);
    }
  }
}

TEST(ProxyElastic, WithoutElasticModeTheFailureNamesThePeer) {
  for (const Death how : {Death::kRefused, Death::kCompletionsFail, Death::kBackpressure}) {
    SCOPED_TRACE(name(how));
    World w(/*elastic=*/false, how, Ordering::kAuto, 300);
    w.dead->store(true);
    RingHandle h = w.cl->rank(0).channel->producer(0);
    ASSERT_NE(h.push(make_write(kDead, 0, 8192, 256, 3)), kPushFailed);
    const std::string e = wait_error(*w.cl);
    const char* want = how == Death::kCompletionsFail ? "a write to rank 1 failed ("
                       : how == Death::kRefused       ? "posting WRITE to rank 1 failed: peer process"
                                                      : "could not post for more than 300 ms";
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_TRUE(w.cl->rank(0).proxy->dropped().list().empty());
  }
}

// A signal whose writes never come (the sender died between them) is held by the receiving
// engine: past the timeout, elastic mode drops the sender (the signal is never applied; later
// traffic from it is discarded), without it the proxy fails naming it.
TEST(ProxyElastic, HeldSignalOfADeadSenderDropsIt) {
  for (const bool elastic : {true, false}) {
    SCOPED_TRACE(elastic ? "elastic" : "plain");
    World w(elastic, Death::kRefused, Ordering::kEngine, /*timeout_ms=*/300);
    LocalCluster& cl = *w.cl;
    RingHandle h1 = cl.rank(1).channel->producer(0);
    for (int t = 0; t < 2; ++t) ASSERT_NE(h1.push(make_write(0, t * 256, 8192 + t * 256, 256, 3)), kPushFailed);
    ASSERT_NE(h1.push(make_signal(0, 7, 1, cmd::kFenceCount, 3, /*fence_count=*/4)), kPushFailed);  // 2 never come
    if (!elastic) {
      const std::string e = wait_error(cl, 10);
      EXPECT_NE(e.find("signal from peer 1 for tag (LL expert / HT channel) 3, counter 7 held for more than 300 ms"),
                std::string::npos)
          << e;
      continue;
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (cl.rank(0).proxy->dropped().list().empty() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(cl.rank(0).proxy->dropped().list(), std::vector<uint32_t>{1u});
    EXPECT_NE(cl.rank(0).proxy->dropped().reason(1).find("held for more than 300 ms"), std::string::npos);
    // The dropped sender's later signals are discarded; rank 2's still arrive.
    const uint64_t q = h1.push(make_signal(0, 8, 1, 0, 3, 0));
    ASSERT_NE(q, kPushFailed);
    ASSERT_TRUE(h1.wait_done(q));
    RingHandle h2 = cl.rank(2).channel->producer(0);
    ASSERT_NE(h2.push(make_signal(0, 9, 1, 0, 3, 0)), kPushFailed);
    ASSERT_EQ(wait_counter(&cl.rank(0).counters[9], 1), 1u);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(port::load_acquire_system(&cl.rank(0).counters[7]), 0u);
    EXPECT_EQ(port::load_acquire_system(&cl.rank(0).counters[8]), 0u);
    cl.check();
  }
}
