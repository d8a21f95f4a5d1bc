#include <gtest/gtest.h>

#include <sched.h>

#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "proxy/async_error.h"
#include "proxy/pinning.h"

using namespace anyep;
using namespace anyep::proxy;

TEST(Pinning, ParsesCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11", "x"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_THROW(parse_cpu_list("3-1", "ANYEP_PROXY_CPUS"), InvalidArgument);
  EXPECT_THROW(parse_cpu_list("a,b", "ANYEP_PROXY_CPUS"), InvalidArgument);
  try {
    parse_cpu_list("", "ANYEP_PROXY_CPUS");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ANYEP_PROXY_CPUS"), std::string::npos);
  }
}

TEST(Pinning, EnvironmentOverridesConfig) {
  ::setenv("ANYEP_PROXY_CPUS", "none", 1);
  EXPECT_TRUE(proxy_cpus({1, 2}, 0).empty());
  // A list names CPUs this process may run on (checked by the environment reader).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> two;
  for (int c = CPU_SETSIZE - 1; c >= 0 && two.size() < 2; --c)
    if (CPU_ISSET(c, &allowed)) two.insert(two.begin(), c);
  const std::string list = std::to_string(two.front()) + "," + std::to_string(two.back());
  ::setenv("ANYEP_PROXY_CPUS", list.c_str(), 1);
  EXPECT_EQ(proxy_cpus({1, 2}, -1), (std::vector<int>{two.front(), two.back()}));
  if (!CPU_ISSET(999, &allowed)) {
    ::setenv("ANYEP_PROXY_CPUS", "999", 1);
    try {
      proxy_cpus({1, 2}, -1);
      ADD_FAILURE() << "ANYEP_PROXY_CPUS=999 accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("ANYEP_PROXY_CPUS='999' names CPU 999"), std::string::npos) << e.what();
    }
  }
  ::setenv("ANYEP_PROXY_CPUS", "auto", 1);
  EXPECT_EQ(proxy_cpus({1, 2}, -1), (std::vector<int>{1, 2}));
  EXPECT_TRUE(proxy_cpus({}, -1).empty()) << "no NUMA node known: not pinned";
  ::unsetenv("ANYEP_PROXY_CPUS");
  bool pinned = false;
  std::thread([&] { pinned = pin_current_thread(0); }).join();  // not the test's own thread
  EXPECT_TRUE(pinned);
  EXPECT_FALSE(pin_current_thread(-1));
}

TEST(AsyncError, FirstErrorWinsAndIsRaisedWithItsStatus) {
  AsyncError e;
  EXPECT_NO_THROW(e.raise_if_set());
  e.set(ANYEP_ERR_TIMEOUT, "rank 3: QUIET waited");
  e.set(ANYEP_ERR_INVALID_ARGUMENT, "later");
  EXPECT_TRUE(e.is_set());
  try {
    e.raise_if_set();
    FAIL();
  } catch (const TimeoutError& t) {
    EXPECT_NE(std::string(t.what()).find("rank 3: QUIET waited (and 1 later error(s))"), std::string::npos) << t.what();
  }
}
