// Native atomics (ProxyConfig::native_atomics): which path signals take and why (describe_paths),
// the errors when the transport cannot give them, and the sender-side fence's failure cases: a
// signal whose writes never complete times out naming what it waited for (or drops the peer in
// elastic mode), a failed add names its peer. The workload runs end to end are in
// test_proxy_random (loopback, chaos) and tests/mp/proxy (tcp, shm).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "cluster_waits.h"
#include "common/error.h"
#include "proxy/completion_context.h"
#include "testkit/local_cluster.h"
#include "transport/chaos/chaos_transport.h"
#include "transport/forwarding_transport.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

// Loopback endpoints with other capabilities: as a backend without atomics (cuda-ipc's words), or
// with atomics whose write completions do not mean placement.
class Pretend final : public transport::ForwardingTransport {
 public:
  Pretend(std::unique_ptr<transport::Transport> inner, std::function<void(transport::Capabilities&)> edit)
      : ForwardingTransport(std::move(inner)), caps_(inner_->capabilities()) {
    edit(caps_);
  }
  const transport::Capabilities& capabilities() const override { return caps_; }

 private:
  transport::Capabilities caps_;
};

// Completions of native-mode posts to rank 1 are swallowed (writes) or failed (adds).
enum class Fault { kWritesNeverComplete, kAddsFail };
class Faulty final : public transport::ForwardingTransport {
 public:
  Faulty(std::unique_ptr<transport::Transport> inner, Fault f) : ForwardingTransport(std::move(inner)), fault_(f) {}
  int poll(transport::Completion* c, size_t mc, size_t* nc, transport::ImmEvent* i, size_t mi, size_t* ni) override {
    const int rc = inner_->poll(c, mc, nc, i, mi, ni);
    size_t kept = 0;
    for (size_t k = 0; k < *nc; ++k) {
      const uint64_t x = c[k].context;
      const bool to1 = completion::native(x) && completion::peer(x) == 1;
      if (to1 && fault_ == Fault::kWritesNeverComplete && !completion::native_add(x)) continue;
      c[kept] = c[k];
      if (to1 && fault_ == Fault::kAddsFail && completion::native_add(x)) {
        c[kept].status = -EIO;
        failed_ = true;
      }
      ++kept;
    }
    *nc = kept;
    return rc;
  }
  std::string last_error() const override { return failed_ ? "the add was refused (test)" : inner_->last_error(); }

 private:
  Fault fault_;
  bool failed_ = false;
};

LocalClusterConfig small(bool native, uint64_t timeout_ms = 20000) {
  LocalClusterConfig c;
  c.ranks = 2;
  c.threads = 1;
  c.rings = 1;
  c.buffer_bytes = 1 << 16;
  c.num_counters = 16;
  c.proxy.num_tags = 16;
  c.proxy.native_atomics = native;
  c.proxy.timeout_ns = timeout_ms * 1000000ull;
  c.proxy.ranks_per_node = 1;
  return c;
}

EndpointFactory wrapped(uint32_t ranks, uint32_t threads,
                        std::function<std::unique_ptr<transport::Transport>(std::unique_ptr<transport::Transport>)> w) {
  EndpointFactory inner = loopback_factory(ranks, threads);
  return [inner, w](uint32_t rank, uint32_t thread) { return w(inner(rank, thread)); };
}

template <class E>
std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(another error) ") + e.what();
  }
  return "(nothing thrown)";
}

const char* kCudaIpcNote = "cuda-ipc has no remote atomics (copy engines and an immediate inbox only)";

}  // namespace

TEST(ProxyNative, DescribeSaysWhichPathSignalsTake) {
  {
    LocalCluster cl(small(false));
    const std::string d = cl.rank(0).proxy->describe_paths();
    EXPECT_FALSE(cl.rank(0).proxy->native_atomics());
    EXPECT_NE(d.find("over loopback/loopback"), std::string::npos) << d;
    EXPECT_NE(
        d.find("signals: emulated (records applied by the receiving proxy on arrival: the transport orders writes)"),
        std::string::npos)
        << d;
    EXPECT_NE(d.find("native atomics: available, not asked for (ProxyConfig::native_atomics)"), std::string::npos) << d;
  }
  {
    LocalCluster cl(small(true));
    const std::string d = cl.rank(1).proxy->describe_paths();
    EXPECT_TRUE(cl.rank(1).proxy->native_atomics());
    EXPECT_NE(d.find("signals: native atomics via loopback/loopback"), std::string::npos) << d;
  }
  {
    LocalClusterConfig lc = small(true);
    lc.endpoints = wrapped(2, 1, [](std::unique_ptr<transport::Transport> t) {
      transport::chaos::ChaosConfig cc;
      cc.seed = 5;
      return transport::chaos::make_chaos_transport(std::move(t), cc);
    });
    LocalCluster cl(lc);
    const std::string d = cl.rank(0).proxy->describe_paths();
    EXPECT_NE(d.find("signals: native atomics via chaos(loopback)/loopback"), std::string::npos) << d;
  }
  {
    LocalClusterConfig lc = small(false);
    lc.proxy.ordering = Ordering::kEngine;
    lc.endpoints = wrapped(2, 1, [](std::unique_ptr<transport::Transport> t) {
      return std::make_unique<Pretend>(std::move(t), [](transport::Capabilities& c) {
        c.backend = c.provider = "cuda-ipc";
        c.native_atomics = false;
        c.atomics_note = kCudaIpcNote;
      });
    });
    LocalCluster cl(lc);
    const std::string d = cl.rank(0).proxy->describe_paths();
    EXPECT_NE(d.find("signals: emulated (records applied by the receiving proxy once its ordering engine saw their "
                     "writes land); native atomics: the transport has none (" +
                     std::string(kCudaIpcNote) + ")"),
              std::string::npos)
        << d;
  }
}

TEST(ProxyNative, AskingOnATransportWithoutThemIsRefusedWithTheReason) {
  LocalClusterConfig lc = small(true);
  lc.endpoints = wrapped(2, 1, [](std::unique_ptr<transport::Transport> t) {
    return std::make_unique<Pretend>(std::move(t), [](transport::Capabilities& c) {
      c.backend = c.provider = "cuda-ipc";
      c.native_atomics = false;
      c.atomics_note = kCudaIpcNote;
    });
  });
  const std::string m = thrown<Unsupported>([&] { LocalCluster cl(lc); });
  EXPECT_NE(
      m.find("native atomics requested (ProxyConfig::native_atomics), but transport cuda-ipc/cuda-ipc has none: " +
             std::string(kCudaIpcNote)),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("leave native_atomics off"), std::string::npos) << m;

  // Atomics, but a write's completion does not say its bytes landed (libfabric without
  // delivery_complete): an add could publish data that is not there, so it is refused too.
  lc.endpoints = wrapped(2, 1, [](std::unique_ptr<transport::Transport> t) {
    return std::make_unique<Pretend>(std::move(t), [](transport::Capabilities& c) { c.placed_writes = false; });
  });
  const std::string p = thrown<Unsupported>([&] { LocalCluster cl(lc); });
  EXPECT_NE(p.find("on transport loopback/loopback a write's completion does not mean its bytes are in the target's "
                   "memory"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("LibfabricConfig::delivery_complete"), std::string::npos) << p;
}

TEST(ProxyNative, RanksMustAgreeOnThePathAndTheCounters) {
  LocalClusterConfig lc = small(true);
  lc.per_rank = [](uint32_t r, ProxyConfig& pc) { pc.native_atomics = r == 0; };
  const std::string m = thrown<InvalidArgument>([&] { LocalCluster cl(lc); });
  EXPECT_NE(m.find("has native_atomics o"), std::string::npos) << m;
  EXPECT_NE(m.find("every rank must send signals the same way"), std::string::npos) << m;
  lc.per_rank = [](uint32_t r, ProxyConfig& pc) { pc.num_counters = r == 0 ? 16 : 8; };
  const std::string c = thrown<InvalidArgument>([&] { LocalCluster cl(lc); });
  EXPECT_NE(c.find("signal counters but this rank"), std::string::npos) << c;
}

TEST(ProxyNative, SignalsAddAfterTheirWritesAndQuietWaitsForTheAdds) {
  LocalCluster cl(small(true));
  cl.start();
  uint8_t* src = cl.rank(0).bytes();
  for (int i = 0; i < 1024; ++i) src[i] = static_cast<uint8_t>(i * 5 + 3);
  RingHandle h = cl.rank(0).channel->producer(0);
  for (int t = 0; t < 4; ++t) ASSERT_NE(h.push(make_write(1, t * 256, 4096 + t * 256, 256, 3)), kPushFailed);
  ASSERT_NE(h.push(make_signal(1, 5, 2, cmd::kFenceCount, 3, 4)), kPushFailed);
  ASSERT_NE(h.push(make_write(1, 0, 8192, 512, 6)), kPushFailed);
  ASSERT_NE(h.push(make_signal(1, 7, 1, cmd::kFenceOrdered, 6)), kPushFailed);
  ASSERT_NE(h.push(make_signal(1, 9, -3)), kPushFailed);  // unfenced, negative
  const uint64_t q = h.push(make_quiet());
  ASSERT_NE(q, kPushFailed);
  ASSERT_TRUE(h.wait_done(q));
  // QUIET retired: the adds were applied (their completions counted), not merely posted.
  EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[5]), 2u);
  EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[7]), 1u);
  EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[9]), static_cast<uint64_t>(-3));
  EXPECT_EQ(std::memcmp(cl.rank(1).bytes() + 4096, src, 1024), 0);
  EXPECT_EQ(std::memcmp(cl.rank(1).bytes() + 8192, src, 512), 0);
  cl.stop();
  const ProxyStats st = cl.rank(0).proxy->stats();
  EXPECT_EQ(st.signals_native, 3u);
  EXPECT_EQ(cl.rank(1).proxy->stats().signals_applied, 0u);  // the receiving proxy applied nothing
  cl.check();
}

TEST(ProxyNative, WriteWithPlusOneIsRejected) {
  LocalCluster cl(small(true));
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(0);
  ASSERT_NE(h.push(make_write(1, 0, 4096, 64, 2, /*signal=*/true)), kPushFailed);
  const std::string m = wait_error(cl);
  EXPECT_NE(m.find("WRITE with kWriteSignal (+1 on arrival) is not supported with native atomics"), std::string::npos)
      << m;
  EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[2]), 0u);
}

TEST(ProxyNative, ASignalWhoseWritesNeverCompleteTimesOutNamingThem) {
  for (const uint8_t fence : {cmd::kFenceCount, cmd::kFenceOrdered}) {
    LocalClusterConfig lc = small(true, 300);
    lc.endpoints = wrapped(2, 1, [](std::unique_ptr<transport::Transport> t) {
      return std::make_unique<Faulty>(std::move(t), Fault::kWritesNeverComplete);
    });
    LocalCluster cl(lc);
    cl.start();
    RingHandle h = cl.rank(0).channel->producer(0);
    ASSERT_NE(h.push(make_write(1, 0, 4096, 64, 4)), kPushFailed);
    ASSERT_NE(h.push(make_write(1, 64, 4160, 64, 4)), kPushFailed);
    ASSERT_NE(h.push(make_signal(1, 3, 1, fence, 4, 2)), kPushFailed);
    const std::string m = wait_error(cl);
    EXPECT_NE(m.find("native SIGNAL to rank 1 (tag 4, counter 3) waited more than 300 ms for the writes it is fenced "
                     "after: "),
              std::string::npos)
        << m;
    EXPECT_NE(
        m.find(fence == cmd::kFenceCount
                   ? "count-fenced (LL): 0 of its 2 writes complete"
                   : "ordered (HT): 0 of the 2 writes posted on that (rank, tag) complete, 0 earlier ordered adds"),
        std::string::npos)
        << m;
    EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[3]), 0u) << "the add never went out";
  }
}

TEST(ProxyNative, ElasticModeDropsThePeerWhoseWritesNeverComplete) {
  LocalClusterConfig lc = small(true, 300);
  lc.ranks = 3;
  lc.proxy.drop_failed_peers = true;
  lc.endpoints = wrapped(3, 1, [](std::unique_ptr<transport::Transport> t) {
    return std::make_unique<Faulty>(std::move(t), Fault::kWritesNeverComplete);
  });
  LocalCluster cl(lc);
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(0);
  ASSERT_NE(h.push(make_write(1, 0, 4096, 64, 4)), kPushFailed);
  ASSERT_NE(h.push(make_signal(1, 3, 1, cmd::kFenceCount, 4, 1)), kPushFailed);
  ASSERT_NE(h.push(make_write(2, 0, 4096, 64, 4)), kPushFailed);
  ASSERT_NE(h.push(make_signal(2, 3, 1, cmd::kFenceCount, 4, 1)), kPushFailed);
  // The signal to rank 1 holds the ring until rank 1 is dropped; then rank 2's round goes through.
  EXPECT_EQ(wait_counter(&cl.rank(2).counters[3], 1), 1u);
  const DroppedPeers& d = cl.rank(0).proxy->dropped();
  ASSERT_TRUE(d.has(1));
  EXPECT_NE(d.reason(1).find("native SIGNAL to rank 1"), std::string::npos) << d.reason(1);
  EXPECT_EQ(port::load_acquire_system(&cl.rank(1).counters[3]), 0u);
  cl.check();
}

TEST(ProxyNative, AFailedAddNamesItsPeer) {
  LocalClusterConfig lc = small(true);
  lc.endpoints = wrapped(2, 1, [](std::unique_ptr<transport::Transport> t) {
    return std::make_unique<Faulty>(std::move(t), Fault::kAddsFail);
  });
  LocalCluster cl(lc);
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(0);
  ASSERT_NE(h.push(make_signal(1, 3, 1)), kPushFailed);
  const std::string m = wait_error(cl);
  EXPECT_NE(m.find("an atomic add (native SIGNAL) to rank 1 failed (" + std::to_string(-EIO) +
                   "): the add was refused (test)"),
            std::string::npos)
      << m;
}
