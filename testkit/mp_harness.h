// anyep/testkit/mp_harness.h — bench/kit/mp_harness.h under the testkit:: names the tests use (the code
// lives in the bench kit, which the `anyep` CLI links without any test scaffolding).
#pragma once

#include "bench/kit/mp_harness.h"

namespace anyep::testkit {
using namespace anyep::benchkit;  // testkit::X is benchkit::X
}  // namespace anyep::testkit

// In the gtest body: skip when a rank skipped, otherwise require every rank to pass.
#define ANYEP_EXPECT_RANKS_OK(res)                      \
  do {                                                  \
    const auto& _r = (res);                             \
    if (_r.skipped()) GTEST_SKIP() << _r.skip_reason(); \
    EXPECT_TRUE(_r.ok()) << _r.summary();               \
  } while (0)
