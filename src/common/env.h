// anyep/src/common/env.h — every environment variable anyep reads, in one place.
// docs/environment.md documents each one; keep the two in step (a test checks the names).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anyep::env {

struct VarInfo {
  const char* name;
  const char* default_value;
  const char* meaning;
};

// The table of all variables (name, default, one-line meaning).
const std::vector<VarInfo>& all_vars();

// Typed readers. Each throws anyep::InvalidArgument naming the variable when its value is malformed,
// and rejects names missing from all_vars() (so no variable can be read without being documented).
std::string get_string(std::string_view name);
int64_t get_int(std::string_view name);
bool get_bool(std::string_view name);
double get_double(std::string_view name);

}  // namespace anyep::env
