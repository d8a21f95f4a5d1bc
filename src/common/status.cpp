// Status names, both spellings: anyep_status_name (ANYEP_ERR_TIMEOUT) and the deprecated
// anyepStatusName (anyepTimeout), from one table.
#include <cstdint>
#include <cstring>

#include "anyep/status.h"

namespace {

struct StatusName {
  anyep_status_t status;
  const char* name;
  const char* old_name;
};

constexpr StatusName kNames[] = {
    {ANYEP_SUCCESS, "ANYEP_SUCCESS", "anyepSuccess"},
    {ANYEP_ERR_INVALID_ARGUMENT, "ANYEP_ERR_INVALID_ARGUMENT", "anyepInvalidArgument"},
    {ANYEP_ERR_TIMEOUT, "ANYEP_ERR_TIMEOUT", "anyepTimeout"},
    {ANYEP_ERR_TRANSPORT, "ANYEP_ERR_TRANSPORT", "anyepTransportError"},
    {ANYEP_ERR_CUDA, "ANYEP_ERR_CUDA", "anyepCudaError"},
    {ANYEP_ERR_INTERNAL, "ANYEP_ERR_INTERNAL", "anyepInternalError"},
    {ANYEP_ERR_UNSUPPORTED, "ANYEP_ERR_UNSUPPORTED", "anyepUnsupported"},
    {ANYEP_ERR_IN_PROGRESS, "ANYEP_ERR_IN_PROGRESS", "anyepInProgress"},
};

// The entry of a status's bits, or null.
const StatusName* find(int32_t s) {
  for (const StatusName& n : kNames)
    if (static_cast<int32_t>(n.status) == s) return &n;
  return nullptr;
}

// The bits, not the enum: a C caller may pass any int, and loading an out-of-range enum (even to
// pass it on) is undefined in C++.
int32_t bits(const anyep_status_t& status) {
  int32_t s;
  static_assert(sizeof status == sizeof s, "C enums are int-sized");
  std::memcpy(&s, &status, sizeof s);
  return s;
}

}  // namespace

extern "C" const char* anyep_status_name(anyep_status_t status) {
  const StatusName* n = find(bits(status));
  return n ? n->name : "ANYEP_ERR_UNKNOWN";
}

extern "C" const char* anyepStatusName(anyep_status_t status) {
  const StatusName* n = find(bits(status));
  return n ? n->old_name : "anyepUnknownStatus";
}
