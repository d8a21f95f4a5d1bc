// The transport factory: names, the errors for unknown and unbuilt names, chaos from the spec and
// from ANYEP_CHAOS_SEED (through TransportSpec::from_env), and loopback endpoints that really talk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "../scoped_env.h"
#include "common/error.h"
#include "common/fabric_providers.h"
#include "transport/factory.h"

namespace anyep::transport {
namespace {

using test_support::ScopedEnv;

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

TEST(Factory, KnowsEveryBackendByName) {
  const auto& n = transport_names();
  for (const char* want : {"tcp", "shm", "efa", "verbs", "cxi", "libfabric", "cuda-ipc", "loopback"})
    EXPECT_NE(std::find(n.begin(), n.end(), want), n.end()) << want;
  // Every provider the table names a transport for (common/fabric_providers.h) is one.
  for (const fabric::Provider& p : fabric::kProviders) {
    if (p.transport.empty()) continue;
    EXPECT_NE(std::find(n.begin(), n.end(), std::string(p.transport)), n.end()) << p.transport;
  }
}

TEST(Factory, UnknownNameIsAnErrorNamingItAndTheChoices) {
  TransportSpec s;
  s.name = "infiniband-please";
  const std::string m = error_of<InvalidArgument>([&] { make_transport(s); });
  EXPECT_NE(m.find("'infiniband-please'"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown"), std::string::npos) << m;
  EXPECT_NE(m.find("efa, cxi, verbs, tcp, shm, emunic, libfabric, cuda-ipc, loopback"), std::string::npos) << m;
  std::string why;
  EXPECT_FALSE(available("infiniband-please", &why));
  EXPECT_NE(why.find("'infiniband-please'"), std::string::npos) << why;
}

TEST(Factory, ABackendNotBuiltHereIsUnsupportedAndSaysSo) {
  // Whichever backends this binary lacks: available() says why, make_transport throws that reason.
  for (const std::string& name : transport_names()) {
    std::string why;
    if (available(name, &why) || why.find("not built") == std::string::npos) continue;
    TransportSpec s;
    s.name = name;
    const std::string m = error_of<Unsupported>([&] { make_transport(s); });
    EXPECT_NE(m.find("'" + name + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("not built into this binary"), std::string::npos) << m;
  }
}

TEST(Factory, LibfabricProviderThatContradictsTheNameIsRefused) {
  TransportSpec s;
  s.name = "tcp";
  s.libfabric.provider = "shm";
  const std::string m = error_of<InvalidArgument>([&] { make_transport(s); });
  EXPECT_NE(m.find("'shm'"), std::string::npos) << m;
  EXPECT_NE(m.find("'tcp'"), std::string::npos) << m;
}

TEST(Factory, LoopbackRanksNeedTheirSharedFabric) {
  TransportSpec s;
  s.name = "loopback";
  s.num_ranks = 2;
  const std::string m = error_of<InvalidArgument>([&] { make_transport(s); });
  EXPECT_NE(m.find("loopback.fabric"), std::string::npos) << m;
  s.num_ranks = 1;  // a single rank gets a fabric of its own
  EXPECT_EQ(make_transport(s)->capabilities().backend, "loopback");
  EXPECT_TRUE(available("loopback"));
}

TEST(Factory, LoopbackEndpointsFromTheFactoryTalk) {
  TransportSpec s;
  s.name = "loopback";
  s.num_ranks = 2;
  s.loopback.fabric = loopback::make_fabric(2);
  s.chaos = chaos::ChaosConfig{};  // through the wrapper too
  s.rank = 0;
  auto t0 = make_transport(s);
  s.rank = 1;
  auto t1 = make_transport(s);
  std::vector<uint8_t> a(64, 7), b(64, 0);
  std::vector<std::vector<uint8_t>> addrs{t0->local_address(), t1->local_address()};
  t0->register_memory(a.data(), a.size(), MemKind::kHost);
  t1->register_memory(b.data(), b.size(), MemKind::kHost);
  t0->connect(addrs);
  t1->connect(addrs);
  t0->import_mr(1, 0, t1->export_mr(0));
  WriteDesc w;
  w.dst_rank = 1;
  w.length = 64;
  w.has_imm = true;
  w.imm = 42;
  ASSERT_EQ(t0->post_write(w), 0) << t0->last_error();
  Completion c[4];
  ImmEvent im[4], none[4];
  size_t ni = 0, comps = 0;
  for (int i = 0; i < 1000 && (ni == 0 || comps == 0); ++i) {  // chaos holds ops a few polls
    size_t n = 0, n0 = 0, n1 = 0;
    ASSERT_EQ(t0->poll(c, 4, &n, none, 4, &n0), 0);
    comps += n;
    EXPECT_EQ(n0, 0u);
    if (ni == 0) {
      ASSERT_EQ(t1->poll(c, 4, &n1, im, 4, &ni), 0);
    }
  }
  ASSERT_EQ(ni, 1u);
  EXPECT_EQ(comps, 1u);
  EXPECT_EQ(im[0].imm, 42u);
  EXPECT_EQ(im[0].src_rank, 0u);
  EXPECT_EQ(b, a);
}

TEST(Factory, ChaosFromTheSpecWrapsTheEndpoint) {
  TransportSpec s;
  s.name = "loopback";
  EXPECT_EQ(make_transport(s)->capabilities().backend, "loopback");
  s.chaos = chaos::ChaosConfig{};
  s.chaos->seed = 5;
  const auto t = make_transport(s);
  EXPECT_EQ(t->capabilities().backend, "chaos(loopback)");
  EXPECT_FALSE(t->capabilities().ordered_writes);
}

// ANYEP_PROXY_ATOMICS=native asks libfabric for what the proxy's native adds need: the add, and
// writes whose completion means placed; emulated (the default) asks for neither.
TEST(Factory, NativeProxyAtomicsFromTheEnvironmentAskLibfabricForAddsAndPlacedWrites) {
  {
    ScopedEnv a("ANYEP_PROXY_ATOMICS", nullptr);
    const TransportSpec s = TransportSpec::from_env("shm", 0, 2);
    EXPECT_FALSE(s.libfabric.want_atomics);
    EXPECT_FALSE(s.libfabric.delivery_complete);
  }
  {
    ScopedEnv a("ANYEP_PROXY_ATOMICS", "native");
    const TransportSpec s = TransportSpec::from_env("shm", 0, 2);
    EXPECT_TRUE(s.libfabric.want_atomics);
    EXPECT_TRUE(s.libfabric.delivery_complete);
  }
  {
    ScopedEnv a("ANYEP_PROXY_ATOMICS", "always");
    const std::string m = error_of<InvalidArgument>([] { TransportSpec::from_env("shm", 0, 2); });
    EXPECT_NE(m.find("ANYEP_PROXY_ATOMICS='always'"), std::string::npos) << m;
  }
}

TEST(Factory, ChaosFromTheEnvironmentThroughFromEnv) {
  {
    ScopedEnv seed("ANYEP_CHAOS_SEED", nullptr);
    const TransportSpec s = TransportSpec::from_env("loopback", 0, 1);
    EXPECT_FALSE(s.chaos.has_value());
    EXPECT_EQ(make_transport(s)->capabilities().backend, "loopback");
  }
  {
    ScopedEnv seed("ANYEP_CHAOS_SEED", "17");
    ScopedEnv delay("ANYEP_CHAOS_MAX_DELAY", "3");
    const TransportSpec s = TransportSpec::from_env("loopback", 0, 1);
    ASSERT_TRUE(s.chaos.has_value());
    EXPECT_EQ(s.chaos->seed, 17u);
    EXPECT_EQ(s.chaos->max_delay, 3u);
    EXPECT_EQ(s.name, "loopback");
    EXPECT_EQ(make_transport(s)->capabilities().backend, "chaos(loopback)");
  }
  {
    ScopedEnv seed("ANYEP_CHAOS_SEED", "x17");
    const std::string m = error_of<InvalidArgument>([] { TransportSpec::from_env("loopback", 0, 1); });
    EXPECT_NE(m.find("ANYEP_CHAOS_SEED"), std::string::npos) << m;
  }
  {
    ScopedEnv seed("ANYEP_CHAOS_SEED", "garbage");  // regression case: was ignored
    const std::string m = error_of<InvalidArgument>([] { TransportSpec::from_env("loopback", 0, 1); });
    EXPECT_NE(m.find("ANYEP_CHAOS_SEED='garbage'"), std::string::npos) << m;
  }
}

TEST(Factory, LibfabricOptionsFromTheEnvironment) {
  {
    ScopedEnv prov("ANYEP_FI_PROVIDER", nullptr), nics("ANYEP_FI_NICS", nullptr), str("ANYEP_FI_STRIPING", nullptr);
    const libfabric::LibfabricConfig c = libfabric::LibfabricConfig::from_env();
    const libfabric::LibfabricConfig d;  // the environment's defaults are the struct's
    EXPECT_EQ(c.provider, d.provider);
    EXPECT_EQ(c.num_nics, d.num_nics);
    EXPECT_EQ(c.striping, d.striping);
  }
  ScopedEnv prov("ANYEP_FI_PROVIDER", "shm"), nics("ANYEP_FI_NICS", "3"), str("ANYEP_FI_STRIPING", "dest");
  const TransportSpec a = TransportSpec::from_env("libfabric", 0, 2);
  EXPECT_EQ(a.libfabric.provider, "shm");  // only "libfabric" takes its provider from the environment
  EXPECT_EQ(a.libfabric.num_nics, 3u);
  EXPECT_EQ(a.libfabric.striping, libfabric::Striping::kDest);
  const TransportSpec b = TransportSpec::from_env("tcp", 0, 2);
  EXPECT_EQ(b.libfabric.provider, "");  // the name says tcp
  EXPECT_EQ(b.libfabric.num_nics, 3u);
  {
    ScopedEnv bad("ANYEP_FI_STRIPING", "zigzag");
    const std::string m = error_of<InvalidArgument>([] { libfabric::LibfabricConfig::from_env(); });
    EXPECT_NE(m.find("ANYEP_FI_STRIPING='zigzag'"), std::string::npos) << m;
  }
  {
    ScopedEnv bad("ANYEP_FI_NICS", "-1");
    const std::string m = error_of<InvalidArgument>([] { libfabric::LibfabricConfig::from_env(); });
    EXPECT_NE(m.find("ANYEP_FI_NICS='-1'"), std::string::npos) << m;
  }
  {
    // Regression case: an unknown provider was ignored; it is refused even where the
    // transport name picks the provider (a documented variable either works or is refused).
    ScopedEnv bad("ANYEP_FI_PROVIDER", "bogus");
    const std::string m = error_of<InvalidArgument>([] { TransportSpec::from_env("tcp", 0, 2); });
    EXPECT_NE(m.find("ANYEP_FI_PROVIDER='bogus' is not one of"), std::string::npos) << m;
    EXPECT_NE(m.find("shm"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace anyep::transport
