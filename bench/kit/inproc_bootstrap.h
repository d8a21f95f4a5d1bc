// anyep/bench/kit/inproc_bootstrap.h — a Bootstrap for ranks that are threads of one process
// (unit tests, benchmarks over loopback, the CPU main job's in-process fallback). Every allgather
// waits at most `timeout_s` and then names the ranks that never arrived.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::benchkit {

class InProcessGroup {
 public:
  InProcessGroup(uint32_t size, double timeout_s) : size_(size), timeout_s_(timeout_s), in_(size) {}
  std::unique_ptr<transport::Bootstrap> member(uint32_t rank);
  std::vector<std::vector<uint8_t>> allgather(uint32_t rank, const std::vector<uint8_t>& mine);
  uint32_t size() const { return size_; }

 private:
  uint32_t size_;
  double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  uint32_t arrived_ = 0;
  std::vector<std::vector<uint8_t>> in_, out_;
  std::vector<bool> present_;
};

}  // namespace anyep::benchkit
