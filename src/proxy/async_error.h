// anyep/src/proxy/async_error.h — the error slot a proxy thread fills and the host API raises.
//
// Proxy threads never throw: they record the first error here (later ones are only counted) and
// the next host API call raises it (AsyncError::raise_if_set throws anyep::Error with the status
// and message recorded). Setting takes a lock; it happens once per failure, never on the hot path.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "anyep/status.h"

namespace anyep::proxy {

class AsyncError {
 public:
  // Records (status, message) unless an error is already recorded.
  void set(anyep_status_t status, const std::string& message);
  bool is_set() const { return status_.load(std::memory_order_acquire) != ANYEP_SUCCESS; }
  // Throws the recorded error, if any (anyep::TimeoutError, InvalidArgument, ... by status).
  void raise_if_set() const;
  std::string message() const;
  anyep_status_t status() const { return status_.load(std::memory_order_acquire); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;
  std::string message_;
  std::atomic<anyep_status_t> status_{ANYEP_SUCCESS};
  std::atomic<uint64_t> count_{0};
};

}  // namespace anyep::proxy
