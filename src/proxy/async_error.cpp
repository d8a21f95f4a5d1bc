#include "proxy/async_error.h"

#include "common/error.h"

namespace anyep::proxy {

void AsyncError::set(anyep_status_t status, const std::string& message) {
  count_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> g(mu_);
  if (status_.load(std::memory_order_relaxed) != ANYEP_SUCCESS) return;
  message_ = message;
  status_.store(status, std::memory_order_release);  // message first, then the flag readers test
}

std::string AsyncError::message() const {
  std::lock_guard<std::mutex> g(mu_);
  return message_;
}

void AsyncError::raise_if_set() const {
  const anyep_status_t s = status();
  if (s == ANYEP_SUCCESS) return;
  std::string m = message();
  const uint64_t n = count();
  if (n > 1) m += " (and " + std::to_string(n - 1) + " later error(s))";
  throw_status(s, m);
}

}  // namespace anyep::proxy
