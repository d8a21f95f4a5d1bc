// anyep/src/common/error.h — exceptions with context inside the library (host code only).
// The C API maps each class to an anyep_status_t; proxy hot paths use return codes instead.
#pragma once

#include <stdexcept>
#include <string>

#include "anyep/status.h"

namespace anyep {

class Error : public std::runtime_error {
 public:
  Error(anyep_status_t status, const std::string& what) : std::runtime_error(what), status_(status) {}
  anyep_status_t status() const noexcept { return status_; }

 private:
  anyep_status_t status_;
};

struct InvalidArgument : Error {
  explicit InvalidArgument(const std::string& w) : Error(ANYEP_ERR_INVALID_ARGUMENT, w) {}
};
struct TimeoutError : Error {
  explicit TimeoutError(const std::string& w) : Error(ANYEP_ERR_TIMEOUT, w) {}
};
struct TransportError : Error {
  explicit TransportError(const std::string& w) : Error(ANYEP_ERR_TRANSPORT, w) {}
};
struct CudaError : Error {
  explicit CudaError(const std::string& w) : Error(ANYEP_ERR_CUDA, w) {}
};
struct InternalError : Error {
  explicit InternalError(const std::string& w) : Error(ANYEP_ERR_INTERNAL, w) {}
};
struct Unsupported : Error {
  explicit Unsupported(const std::string& w) : Error(ANYEP_ERR_UNSUPPORTED, w) {}
};

// Throws the class that maps to `status` (InternalError for a status with no class of its own):
// how an error recorded as (status, message) on one thread is raised on another, or re-raised
// with more context, keeping the type callers catch.
[[noreturn]] inline void throw_status(anyep_status_t status, const std::string& what) {
  switch (status) {
    case ANYEP_ERR_INVALID_ARGUMENT:
      throw InvalidArgument(what);
    case ANYEP_ERR_TIMEOUT:
      throw TimeoutError(what);
    case ANYEP_ERR_TRANSPORT:
      throw TransportError(what);
    case ANYEP_ERR_CUDA:
      throw CudaError(what);
    case ANYEP_ERR_UNSUPPORTED:
      throw Unsupported(what);
    default:
      throw InternalError(what);
  }
}

// "file:line: message" helper for internal invariants.
#define ANYEP_CHECK(cond, ...)                                                                \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::anyep::InternalError(std::string(__FILE__ ":") + std::to_string(__LINE__) +     \
                                   ": check failed: " #cond ": " + std::string(__VA_ARGS__)); \
  } while (0)

}  // namespace anyep
