// tests/mp/provider_required.h — a libfabric provider this machine lacks skips a multi-process test,
// unless the run requires it: ANYEP_TEST_REQUIRE_PROVIDERS=tcp,shm (set by scripts/test.sh and
// .ci/run) turns that skip into a failure, so "100% passed" cannot hide tests that never ran.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace anyep::mptest {

// True when ANYEP_TEST_REQUIRE_PROVIDERS lists `provider` or its base ("tcp" for "tcp;ofi_rxm").
inline bool provider_required(const std::string& provider) {
  const char* v = std::getenv("ANYEP_TEST_REQUIRE_PROVIDERS");
  if (!v) return false;
  const std::string list = std::string(",") + v + ",";
  const std::string base = provider.substr(0, provider.find(';'));
  return list.find("," + provider + ",") != std::string::npos || list.find("," + base + ",") != std::string::npos;
}

inline std::string missing_text(const std::string& provider, const std::string& why) {
  return "libfabric provider '" + provider + "' is not available (" + why +
         (provider_required(provider) ? "), and ANYEP_TEST_REQUIRE_PROVIDERS requires it" : ")");
}

// Inside a rank of testkit::run_ranks: skip (testkit::Skip) or, when required, fail.
template <class SkipT>
void require_in_rank(bool available, const std::string& provider, const std::string& why) {
  if (available) return;
  if (provider_required(provider)) throw std::runtime_error(missing_text(provider, why));
  throw SkipT(missing_text(provider, why));
}

}  // namespace anyep::mptest

// In a test body: skip when `available` is false, or fail when the run requires `provider`.
#define ANYEP_REQUIRE_PROVIDER(available, provider, why)              \
  do {                                                                \
    if (!(available)) {                                               \
      if (::anyep::mptest::provider_required(provider)) {             \
        FAIL() << ::anyep::mptest::missing_text(provider, why);       \
      } else {                                                        \
        GTEST_SKIP() << ::anyep::mptest::missing_text(provider, why); \
      }                                                               \
    }                                                                 \
  } while (0)
