// throw_status: an error recorded as (status, message) is raised as the class callers catch for
// that status, with the message unchanged (the proxy's AsyncError and the LL proxy link's
// re-raise with advice depend on it).
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace anyep {
namespace {

template <typename E>
void expect_raised_as(anyepStatus s) {
  try {
    throw_status(s, "rank 2: what went wrong");
  } catch (const E& e) {
    EXPECT_EQ(e.status(), s == anyepInProgress ? anyepInternalError : s);
    EXPECT_EQ(std::string(e.what()), "rank 2: what went wrong");
    return;
  } catch (...) {
  }
  ADD_FAILURE() << "status " << static_cast<int>(s) << " was not raised as the expected class";
}

TEST(ThrowStatus, EachStatusRaisesItsClassWithTheMessage) {
  expect_raised_as<InvalidArgument>(anyepInvalidArgument);
  expect_raised_as<TimeoutError>(anyepTimeout);
  expect_raised_as<TransportError>(anyepTransportError);
  expect_raised_as<CudaError>(anyepCudaError);
  expect_raised_as<Unsupported>(anyepUnsupported);
  expect_raised_as<InternalError>(anyepInternalError);
  expect_raised_as<InternalError>(anyepInProgress);  // no class of its own: a bug if raised
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
