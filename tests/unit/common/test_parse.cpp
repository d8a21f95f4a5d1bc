// src/common/parse.h: strict command-line values (the whole text, base 10, in range, exact choices).
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "common/parse.h"

using namespace anyep;

namespace {
// The message of the InvalidArgument that fn throws ("" when it does not throw).
template <class F>
std::string refusal(F fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ParseCount, AcceptsWholeNumbersInRange) {
  EXPECT_EQ(parse_count("--ranks", "4", 1, 256), 4u);
  EXPECT_EQ(parse_count("--ranks", "1", 1, 256), 1u);
  EXPECT_EQ(parse_count("--ranks", "256", 1, 256), 256u);
  EXPECT_EQ(parse_count("--ranks", "010", 1, 256), 10u);  // base 10, not octal
  EXPECT_EQ(parse_count("--seed", "18446744073709551615", 0, UINT64_MAX), UINT64_MAX);
}

TEST(ParseCount, RefusesTextSignsSuffixesAndOutOfRangeNamingTheFlag) {
  for (const char* bad : {"abc", "-1", "4x", " 4", "4 ", "+4", "", "1e3", "0x10", "4.0"}) {
    std::string m = refusal([&] { parse_count("--ranks", bad, 1, 256); });
    EXPECT_NE(m.find("--ranks='" + std::string(bad) + "'"), std::string::npos) << bad << ": " << m;
    EXPECT_NE(m.find("[1, 256]"), std::string::npos) << m;
  }
  EXPECT_NE(refusal([] { parse_count("--ranks", "0", 1, 256); }).find("out of range"), std::string::npos);
  EXPECT_NE(refusal([] { parse_count("--ranks", "257", 1, 256); }).find("out of range"), std::string::npos);
  EXPECT_NE(refusal([] { parse_count("--seed", "18446744073709551616", 0, UINT64_MAX); }).find("too large"),
            std::string::npos);
}

TEST(ParseSeconds, AcceptsFiniteDecimalsInRange) {
  EXPECT_DOUBLE_EQ(parse_seconds("--liveness-s", "1.5", 0.1, 60), 1.5);
  EXPECT_DOUBLE_EQ(parse_seconds("--liveness-s", "2e1", 0.1, 60), 20.0);
  EXPECT_DOUBLE_EQ(parse_seconds("--liveness-s", "60", 0.1, 60), 60.0);
}

TEST(ParseSeconds, RefusesNonFiniteNegativeAndJunk) {
  for (const char* bad : {"-5", "0", "1e30", "inf", "nan", "infinity", "", " 1", "1s", "0x10", "1..2", "1e999"}) {
    std::string m = refusal([&] { parse_seconds("--liveness-s", bad, 0.1, 60); });
    EXPECT_NE(m.find("--liveness-s='" + std::string(bad) + "'"), std::string::npos) << bad << ": " << m;
  }
}

TEST(ParseChoice, AcceptsExactlyAndNamesTheChoicesOtherwise) {
  EXPECT_EQ(parse_choice("--provider", "tcp", {"shm", "tcp", "loopback"}), "tcp");
  std::string m = refusal([] { parse_choice("--provider", "nosuch", {"shm", "tcp", "loopback"}); });
  EXPECT_NE(m.find("--provider='nosuch'"), std::string::npos) << m;
  EXPECT_NE(m.find("shm, tcp, loopback"), std::string::npos) << m;
  EXPECT_NE(refusal([] { parse_choice("--provider", "TCP", {"shm", "tcp"}); }), "");
  EXPECT_NE(refusal([] { parse_choice("--provider", "", {"shm", "tcp"}); }), "");
}
