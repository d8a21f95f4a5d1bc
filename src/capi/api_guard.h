// anyep/src/capi/api_guard.h — the C boundary: every exported function runs its body through
// guarded(), which turns anyep's exceptions (and anything else thrown) into an anyepStatus and
// this thread's last-error text, so no C++ exception crosses into C.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "anyep/status.h"
#include "common/error.h"

namespace anyep::capi {

// Records "<function>: <message>" as this thread's last error and returns `status`.
anyepStatus fail(const char* function, anyepStatus status, const std::string& message);
// This thread's last error ("" if none).
const char* last_error();

template <typename F>
anyepStatus guarded(const char* function, F&& body) noexcept {
  try {
    body();
    return anyepSuccess;
  } catch (const Error& e) {
    return fail(function, e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(function, anyepInternalError, "out of host memory");
  } catch (const std::exception& e) {
    return fail(function, anyepInternalError, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return fail(function, anyepInternalError, "unexpected error of unknown type");
  }
}

// Throws InvalidArgument "<name> is NULL" when p is null.
inline void require(const void* p, const char* name) {
  if (p == nullptr) throw InvalidArgument(std::string(name) + " is NULL");
}

}  // namespace anyep::capi
