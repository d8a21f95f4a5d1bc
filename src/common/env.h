// anyep/src/common/env.h — every environment variable anyep reads, in one place, with its type and
// range. docs/environment.md documents each one; keep the two in step (a test checks the names).
//
// Each variable is read only through the reader of its declared type; a value that does not parse
// or is out of range is refused with anyep::InvalidArgument naming the variable and the value
// (never clamped, never ignored). Unset or empty means the declared default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anyep::env {

enum class Type {
  kDuration,  // seconds, decimal or floating point: finite, > 0, <= max
  kCount,     // decimal integer in [min, max]
  kBool,      // 1/true/on/yes or 0/false/off/no
  kEnum,      // one of `choices` ('|'-separated; an empty choice means the empty value is allowed)
  kSeed,      // empty (off) or a decimal integer in [0, 2^64)
  kCpuList,   // auto, none, or a CPU list like 0-3,8 of CPUs this process may run on
  kSecret,    // any printable text of at most `max` bytes; errors never echo the value
};

struct VarInfo {
  const char* name;
  const char* default_value;
  const char* meaning;
  Type type;
  double min = 0;                 // kDuration: exclusive lower bound; kCount: inclusive
  double max = 0;                 // kDuration, kCount: inclusive upper bound
  const char* choices = nullptr;  // kEnum
};

// The table of all variables (name, default, meaning, type and range).
const std::vector<VarInfo>& all_vars();
// The declared range or choices in words ("1..64", "auto, engine, bypass"), as docs/environment.md shows it.
std::string range_text(const VarInfo& v);

// Typed readers. Each throws anyep::InvalidArgument naming the variable and its value when the value
// is malformed or out of range, and anyep::InternalError when the name is not declared in all_vars()
// or is declared with another type (so no variable is read without being documented and checked).
double get_duration_s(std::string_view name);
// The duration in nanoseconds; the range is checked before converting (no overflowing cast).
uint64_t get_duration_ns(std::string_view name);
int64_t get_count(std::string_view name);
bool get_bool(std::string_view name);
std::string get_enum(std::string_view name);
std::optional<uint64_t> get_seed(std::string_view name);  // nullopt: empty (off)

struct CpuChoice {
  enum class Mode { kAuto, kNone, kList } mode = Mode::kAuto;
  std::vector<int> cpus;  // kList: in the order given
};
CpuChoice get_cpu_choice(std::string_view name);
std::string get_secret(std::string_view name);  // "" when unset

}  // namespace anyep::env
