// anyep/src/capi/registry.h — the live objects behind the C API's opaque handles. A handle's value
// is an id that is never reused (not an address), so a handle that was destroyed, or a value that
// was never a handle, is recognised and refused instead of being dereferenced.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/error.h"

namespace anyep::capi {

template <typename T>
class Registry {
 public:
  explicit Registry(const char* kind) : kind_(kind) {}

  uint64_t add(std::shared_ptr<T> obj) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = next_++;
    live_.emplace(id, std::move(obj));
    return id;
  }
  // The object behind `id`; InvalidArgument when there is none.
  std::shared_ptr<T> get(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) throw InvalidArgument(gone(id));
    return it->second;
  }
  // Removes and returns the object behind `id` (its last user frees it).
  std::shared_ptr<T> take(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) throw InvalidArgument(gone(id));
    std::shared_ptr<T> obj = std::move(it->second);
    live_.erase(it);
    return obj;
  }

 private:
  std::string gone(uint64_t id) const {
    std::string m = kind_;
    m += " ";
    m += std::to_string(id);
    m += " is not a live ";
    m += kind_;
    m += " (destroyed already, or never created)";
    return m;
  }
  const char* kind_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<T>> live_;
  uint64_t next_ = 1;
};

}  // namespace anyep::capi
