// anyep/testkit/workload_rank.h — bench/kit/workload_rank.h under the testkit:: names the tests use (the code
// lives in the bench kit, which the `anyep` CLI links without any test scaffolding).
#pragma once

#include "bench/kit/workload_rank.h"

namespace anyep::testkit {
using namespace anyep::benchkit;  // testkit::X is benchkit::X
}  // namespace anyep::testkit
