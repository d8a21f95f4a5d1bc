// Bounded waits the proxy tests share: for a counter to reach a value, and for a cluster to report
// an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/portability.h"
#include "testkit/local_cluster.h"

namespace anyep::testkit {

// The counter's value once it reached `want`, or what it held when `seconds` ran out.
inline uint64_t wait_counter(const uint64_t* c, uint64_t want, double seconds = 20) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t v;
  while ((v = port::load_acquire_system(c)) < want && std::chrono::steady_clock::now() < end) std::this_thread::yield();
  return v;
}

// Waits until the cluster reports an error; returns its message ("" if none within the limit).
inline std::string wait_error(LocalCluster& cl, double seconds = 20) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    try {
      cl.check();
    } catch (const Error& e) {
      return e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return "";
}

}  // namespace anyep::testkit
