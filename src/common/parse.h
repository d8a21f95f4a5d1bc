// anyep/src/common/parse.h — strict parsing of command-line values (and any other text a user
// types): the whole text must be the value ("4x" and " 4" are refused), numbers are base 10,
// counts and durations are range-checked, choices are exact. Every refusal is an
// anyep::InvalidArgument that names the flag or variable, the text, and what is accepted.
//
//   uint32_t ranks = uint32_t(parse_count("--ranks", argv[i], 1, 256));
//   double t = parse_seconds("--timeout-s", argv[i], 0.001, 3600);
//   std::string p = parse_choice("--provider", argv[i], {"shm", "tcp", "loopback"});
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/error.h"

namespace anyep {

namespace parse_detail {
inline std::string quoted(std::string_view what, std::string_view text) {
  return std::string(what) + "='" + std::string(text) + "'";
}
inline std::string number(double v) {  // shortest form: 0.001, 3600, 1e+06
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace parse_detail

// An unsigned integer in [min, max]: digits only (no sign, no spaces, no suffix), base 10.
inline uint64_t parse_count(std::string_view what, std::string_view text, uint64_t min, uint64_t max) {
  const std::string range = " (accepted: an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "])";
  if (text.empty()) throw InvalidArgument(parse_detail::quoted(what, text) + " is empty" + range);
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') throw InvalidArgument(parse_detail::quoted(what, text) + " is not a whole number" + range);
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) throw InvalidArgument(parse_detail::quoted(what, text) + " is too large" + range);
    v = v * 10 + d;
  }
  if (v < min || v > max) throw InvalidArgument(parse_detail::quoted(what, text) + " is out of range" + range);
  return v;
}

// A finite number of seconds in [min, max] ("1.5", "1e-3"; no "inf", "nan", spaces or units).
inline double parse_seconds(std::string_view what, std::string_view text, double min, double max) {
  const std::string range =
      " (accepted: seconds in [" + parse_detail::number(min) + ", " + parse_detail::number(max) + "])";
  const std::string s(text);
  // strtod skips leading spaces and reads "inf"/"nan"/hex: take only plain decimal text.
  bool plain = !s.empty();
  for (char c : s) plain &= (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+';
  if (!plain) throw InvalidArgument(parse_detail::quoted(what, text) + " is not a number" + range);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) throw InvalidArgument(parse_detail::quoted(what, text) + " is not a number" + range);
  if (errno == ERANGE || !std::isfinite(v) || v < min || v > max)
    throw InvalidArgument(parse_detail::quoted(what, text) + " is out of range" + range);
  return v;
}

// One of `choices`, exactly (case-sensitive).
inline std::string parse_choice(std::string_view what, std::string_view text,
                                std::initializer_list<std::string_view> choices) {
  std::string accepted;
  for (std::string_view c : choices) {
    if (text == c) return std::string(text);
    accepted += accepted.empty() ? "" : ", ";
    accepted += c;
  }
  throw InvalidArgument(parse_detail::quoted(what, text) + " is not accepted (accepted: " + accepted + ")");
}

}  // namespace anyep
