// anyep/src/capi/api_guard.h — the C boundary: every exported function runs its body through
// guarded(), which turns anyep's exceptions (and anything else thrown) into an anyep_status_t and
// this thread's last-error text, so no C++ exception crosses into C.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "anyep/status.h"
#include "common/error.h"

namespace anyep::capi {

// Records "<function>: <message>" as this thread's last error and returns `status`.
anyep_status_t fail(const char* function, anyep_status_t status, const std::string& message);
// This thread's last error ("" if none).
const char* last_error();

template <typename F>
anyep_status_t guarded(const char* function, F&& body) noexcept {
  try {
    body();
    return ANYEP_SUCCESS;
  } catch (const Error& e) {
    return fail(function, e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(function, ANYEP_ERR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(function, ANYEP_ERR_INTERNAL, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return fail(function, ANYEP_ERR_INTERNAL, "unexpected error of unknown type");
  }
}

// Throws InvalidArgument "<name> is NULL" when p is null.
inline void require(const void* p, const char* name) {
  if (p == nullptr) throw InvalidArgument(std::string(name) + " is NULL");
}

}  // namespace anyep::capi
