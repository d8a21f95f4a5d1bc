// The C API's last-error text and version (anyep_get_last_error, anyep_version); the status names
// are common/status.cpp's.
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
