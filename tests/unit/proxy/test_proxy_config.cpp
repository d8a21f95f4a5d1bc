// ProxyConfig holds plain values: from_env() reads ANYEP_TIMEOUT_S, ANYEP_PROXY_ORDERING,
// ANYEP_PROXY_RANKS_PER_HOST and ANYEP_PROXY_ATOMICS once, the Proxy itself reads no environment, and values it cannot
// use are refused with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "../scoped_env.h"
#include "common/error.h"
#include "proxy/proxy.h"
#include "testkit/local_cluster.h"

using namespace anyep;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

using test_support::ScopedEnv;

std::string invalid_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

TEST(ProxyConfig, FromEnvDefaultsAreTheStructDefaults) {
  ScopedEnv t("ANYEP_TIMEOUT_S", nullptr), o("ANYEP_PROXY_ORDERING", nullptr), r("ANYEP_PROXY_RANKS_PER_HOST", nullptr),
      a("ANYEP_PROXY_ATOMICS", nullptr);
  const ProxyConfig c = ProxyConfig::from_env(), d;
  EXPECT_EQ(c.timeout_ns, d.timeout_ns);
  EXPECT_EQ(c.ordering, d.ordering);
  EXPECT_FALSE(c.native_atomics);
  EXPECT_EQ(c.native_atomics, d.native_atomics);
  EXPECT_FALSE(c.ranks_per_node.has_value());  // 0: detect
}

TEST(ProxyConfig, FromEnvReadsEachVariable) {
  ScopedEnv t("ANYEP_TIMEOUT_S", "2.5"), o("ANYEP_PROXY_ORDERING", "engine"), r("ANYEP_PROXY_RANKS_PER_HOST", "4"),
      a("ANYEP_PROXY_ATOMICS", "native");
  const ProxyConfig c = ProxyConfig::from_env();
  EXPECT_TRUE(c.native_atomics);
  EXPECT_EQ(c.timeout_ns, 2'500'000'000ull);
  EXPECT_EQ(c.ordering, Ordering::kEngine);
  ASSERT_TRUE(c.ranks_per_node.has_value());
  EXPECT_EQ(*c.ranks_per_node, 4u);
}

TEST(ProxyConfig, FromEnvNamesABadVariable) {
  {
    ScopedEnv o("ANYEP_PROXY_ORDERING", "sometimes");
    EXPECT_NE(invalid_message([] { ProxyConfig::from_env(); }).find("ANYEP_PROXY_ORDERING='sometimes'"),
              std::string::npos);
  }
  {
    ScopedEnv r("ANYEP_PROXY_RANKS_PER_HOST", "-2");
    EXPECT_NE(invalid_message([] { ProxyConfig::from_env(); }).find("ANYEP_PROXY_RANKS_PER_HOST='-2'"),
              std::string::npos);
  }
  {
    ScopedEnv a("ANYEP_PROXY_ATOMICS", "sometimes");
    EXPECT_NE(invalid_message([] { ProxyConfig::from_env(); }).find("ANYEP_PROXY_ATOMICS='sometimes'"),
              std::string::npos);
  }
  {
    ScopedEnv t("ANYEP_TIMEOUT_S", "-1");
    EXPECT_NE(invalid_message([] { ProxyConfig::from_env(); }).find("ANYEP_TIMEOUT_S"), std::string::npos);
  }
  // Regression cases: -5 disabled every timeout, 0 and 1e30 failed spuriously.
  for (const char* bad : {"-5", "0", "1e30"}) {
    ScopedEnv t("ANYEP_TIMEOUT_S", bad);
    EXPECT_NE(invalid_message([] {
                ProxyConfig::from_env();
              }).find("ANYEP_TIMEOUT_S='" + std::string(bad) + "' is out of range"),
              std::string::npos)
        << bad;
  }
}

TEST(ProxyConfig, TheProxyIgnoresTheEnvironment) {
  // A bad ordering in the environment would throw if the proxy read it; a plain config does not.
  ScopedEnv o("ANYEP_PROXY_ORDERING", "sometimes"), r("ANYEP_PROXY_RANKS_PER_HOST", "-2");
  LocalClusterConfig lc;
  lc.proxy.ordering = Ordering::kEngine;
  LocalCluster cl(lc);
  EXPECT_FALSE(cl.rank(0).proxy->bypass());
}

TEST(ProxyConfig, TheProxyRefusesValuesItCannotUse) {
  LocalClusterConfig lc;
  lc.proxy.ranks_per_node = 0u;
  EXPECT_NE(invalid_message([&] { LocalCluster cl(lc); }).find("leave it unset to detect"), std::string::npos);
  lc.proxy.ranks_per_node.reset();
  lc.proxy.timeout_ns = 0;
  EXPECT_NE(invalid_message([&] { LocalCluster cl(lc); }).find("timeout_ns"), std::string::npos);
}

}  // namespace
