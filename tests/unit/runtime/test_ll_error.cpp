// The text of an LL kernel's error record (runtime/ll/error.h): every wait that gave up names the
// reporting rank, the expert and the peer it waited for (the Python LL tests parse "from rank N"),
// refused input is InvalidArgument, and an empty record raises nothing. No GPU needed.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "runtime/ll/error.h"

namespace anyep::runtime {
namespace {

ll::ErrorRecord record(int32_t rank, int32_t expert, int32_t peer, int32_t value) {
  ll::ErrorRecord e{};
  e.rank = rank, e.expert = expert, e.peer = peer, e.value = value;
  return e;
}

// The message of the exception raise_device_error throws, which must be an E.
template <class E>
std::string message_of(uint32_t code, const ll::ErrorRecord& e) {
  try {
    raise_device_error(code, e);
  } catch (const E& x) {
    return x.what();
  } catch (const std::exception& x) {
    ADD_FAILURE() << "code " << code << ": wrong exception type: " << x.what();
    return x.what();
  }
  ADD_FAILURE() << "code " << code << ": nothing raised";
  return "";
}

void expect_has(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << "'" << m << "' lacks '" << part << "'";
}

TEST(LLDeviceError, NoneRaisesNothing) { EXPECT_NO_THROW(raise_device_error(ll::kErrNone, record(0, 1, 2, 3))); }

TEST(LLDeviceError, TimeoutsNameRankExpertAndPeer) {
  std::string m = message_of<TimeoutError>(ll::kErrDispatchRecvTimeout, record(0, 5, 1, -1));
  expect_has(m, "anyep LL: rank 0: dispatch timed out waiting for the token count of expert 5 from rank 1 (");
  expect_has(m, "ANYEP_TIMEOUT_S");
  expect_has(m, "clean_low_latency_buffer");
  // What tests/python/ll_harness.py (c_timeout, the killed-rank world) reads back.
  EXPECT_EQ(m.substr(m.find("from rank ") + 10, 2), "1 ");

  m = message_of<TimeoutError>(ll::kErrCombineRecvTimeout, record(2, 11, 3, -1));
  expect_has(m, "rank 2: combine timed out waiting for expert 11 (owned by rank 3)");
  EXPECT_EQ(m.find("needed by token"), std::string::npos) << m;
  expect_has(message_of<TimeoutError>(ll::kErrCombineRecvTimeout, record(2, 11, 3, 7)),
             "(owned by rank 3) needed by token 7");

  expect_has(message_of<TimeoutError>(ll::kErrRingTimeout, record(1, 4, 0, 2)),
             "rank 1: proxy ring 2 stayed full while sending expert 4 to rank 0 (proxy stalled or stopped)");
  expect_has(message_of<TimeoutError>(ll::kErrSendTimeout, record(1, 9, -1, 12)),
             "rank 1: dispatch send timed out: this GPU's blocks did not finish the 12 tokens for expert 9");
  expect_has(message_of<TimeoutError>(ll::kErrBarrierTimeout, record(2, -1, 1, -1)),
             "rank 2: the clean barrier timed out waiting for rank 1");
  expect_has(message_of<TimeoutError>(ll::kErrNoPeer, record(0, 7, 3, -1)),
             "rank 0: rank 3 (expert 7) has no direct path and this buffer has no proxy");
}

TEST(LLDeviceError, RefusedInputIsInvalidArgument) {
  expect_has(message_of<InvalidArgument>(ll::kErrBadExpert, record(0, 300, -1, 9)),
             "rank 0: topk_idx holds expert 300 (token 9), outside [-1, num_experts)");
  expect_has(message_of<InvalidArgument>(ll::kErrSlotOverflow, record(1, 6, -1, -1)),
             "rank 1: more than num_max_dispatch_tokens_per_rank messages for expert 6");
}

TEST(LLDeviceError, UnknownCodeIsNamed) {
  expect_has(message_of<TimeoutError>(99, record(3, -1, -1, -1)), "rank 3: unknown device error code 99");
}

}  // namespace
}  // namespace anyep::runtime
