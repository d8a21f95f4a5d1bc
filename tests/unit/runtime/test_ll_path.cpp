// LL path selection (ANYEP_LL_PATH): the accepted names, the environment default, and a bad value
// named in the error. No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/error.h"
#include "runtime/common/path.h"

namespace anyep::runtime {
namespace {

TEST(LLPath, NamesRoundTrip) {
  for (LLPath p : {LLPath::kAuto, LLPath::kProxyCudaIpc, LLPath::kProxyLibfabric})
    EXPECT_EQ(parse_ll_path(ll_path_name(p)), p) << ll_path_name(p);
}

TEST(LLPath, EmptyReadsTheEnvironment) {
  unsetenv("ANYEP_LL_PATH");
  EXPECT_EQ(parse_ll_path(""), LLPath::kAuto);  // documented default
  setenv("ANYEP_LL_PATH", "proxy-cuda-ipc", 1);
  EXPECT_EQ(parse_ll_path(""), LLPath::kProxyCudaIpc);
  unsetenv("ANYEP_LL_PATH");
}

TEST(LLPath, BadValueNamesTheChoices) {
  try {
    parse_ll_path("nvlink-please");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nvlink-please"), std::string::npos) << m;
    EXPECT_NE(m.find("proxy-libfabric"), std::string::npos) << m;
    EXPECT_NE(m.find("ANYEP_LL_PATH"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace anyep::runtime
