// anyep/testkit/inproc_bootstrap.h — bench/kit/inproc_bootstrap.h under the testkit:: names the tests use (the code
// lives in the bench kit, which the `anyep` CLI links without any test scaffolding).
#pragma once

#include "bench/kit/inproc_bootstrap.h"

namespace anyep::testkit {
using namespace anyep::benchkit;  // testkit::X is benchkit::X
}  // namespace anyep::testkit
