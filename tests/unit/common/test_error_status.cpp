// throw_status: an error recorded as (status, message) is raised as the class callers catch for
// that status, with the message unchanged (the proxy's AsyncError and the LL proxy link's
// re-raise with advice depend on it).
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace anyep {
namespace {

template <typename E>
void expect_raised_as(anyep_status_t s) {
  try {
    throw_status(s, "rank 2: what went wrong");
  } catch (const E& e) {
    EXPECT_EQ(e.status(), s == ANYEP_ERR_IN_PROGRESS ? ANYEP_ERR_INTERNAL : s);
    EXPECT_EQ(std::string(e.what()), "rank 2: what went wrong");
    return;
  } catch (...) {
  }
  ADD_FAILURE() << "status " << static_cast<int>(s) << " was not raised as the expected class";
}

TEST(ThrowStatus, EachStatusRaisesItsClassWithTheMessage) {
  expect_raised_as<InvalidArgument>(ANYEP_ERR_INVALID_ARGUMENT);
  expect_raised_as<TimeoutError>(ANYEP_ERR_TIMEOUT);
  expect_raised_as<TransportError>(ANYEP_ERR_TRANSPORT);
  expect_raised_as<CudaError>(ANYEP_ERR_CUDA);
  expect_raised_as<Unsupported>(ANYEP_ERR_UNSUPPORTED);
  expect_raised_as<InternalError>(ANYEP_ERR_INTERNAL);
  expect_raised_as<InternalError>(ANYEP_ERR_IN_PROGRESS);  // no class of its own: a bug if raised
}

TEST(ThrowStatus, ReRaisingWithContextKeepsTheType) {
  try {
    try {
      throw TimeoutError("proxy thread 1: QUIET waited 5 s");
    } catch (const Error& e) {
      throw_status(e.status(), std::string(e.what()) + " [advice]");
    }
  } catch (const TimeoutError& t) {
    EXPECT_EQ(std::string(t.what()), "proxy thread 1: QUIET waited 5 s [advice]");
    return;
  }
  FAIL() << "not re-raised as TimeoutError";
}

}  // namespace
}  // namespace anyep
