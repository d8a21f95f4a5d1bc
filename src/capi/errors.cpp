// The C API's last-error text, status names and version (anyep_get_last_error, anyep_status_name,
// anyep_version).
#include <cstdint>
#include <cstring>
#include <string>

#include "anyep/anyep.h"
#include "capi/api_guard.h"

namespace anyep::capi {
namespace {
thread_local std::string t_last_error;
}  // namespace

anyep_status_t fail(const char* function, anyep_status_t status, const std::string& message) {
  try {
    t_last_error = function;
    t_last_error += ": ";
    t_last_error += message;
  } catch (...) {
    // Out of memory while recording the error: keep the status, lose the text.
  }
  return status;
}

const char* last_error() { return t_last_error.c_str(); }

}  // namespace anyep::capi

extern "C" const char* anyep_get_last_error(void) { return anyep::capi::last_error(); }

extern "C" const char* anyep_version(void) { return ANYEP_VERSION_STRING; }

extern "C" const char* anyep_status_name(anyep_status_t status) {
  // The bits, not the enum: a C caller may pass any int (loading an out-of-range enum is undefined in C++).
  int32_t s;
  static_assert(sizeof status == sizeof s, "C enums are int-sized");
  std::memcpy(&s, &status, sizeof s);
  switch (s) {
    case ANYEP_SUCCESS:
      return "ANYEP_SUCCESS";
    case ANYEP_ERR_INVALID_ARGUMENT:
      return "ANYEP_ERR_INVALID_ARGUMENT";
    case ANYEP_ERR_TIMEOUT:
      return "ANYEP_ERR_TIMEOUT";
    case ANYEP_ERR_TRANSPORT:
      return "ANYEP_ERR_TRANSPORT";
    case ANYEP_ERR_CUDA:
      return "ANYEP_ERR_CUDA";
    case ANYEP_ERR_INTERNAL:
      return "ANYEP_ERR_INTERNAL";
    case ANYEP_ERR_UNSUPPORTED:
      return "ANYEP_ERR_UNSUPPORTED";
    case ANYEP_ERR_IN_PROGRESS:
      return "ANYEP_ERR_IN_PROGRESS";
  }
  return "ANYEP_ERR_UNKNOWN";
}
