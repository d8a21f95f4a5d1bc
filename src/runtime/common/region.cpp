#include "runtime/common/region.h"

#include <cstring>
#include <string>
#include <utility>

#include "common/cuda_check.h"

namespace anyep::runtime {

// Both constructors delegate to the default one, so a throw after the allocation runs the
// destructor, which frees it.
DeviceRegion::DeviceRegion(size_t bytes, const char* label, bool zero) : DeviceRegion() {
  label_ = label;
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, bytes), label, "cudaMalloc of " + std::to_string(bytes) + " bytes");
  ptr_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  if (zero) this->zero();
}

void DeviceRegion::reset() noexcept {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  size_ = 0;
}

void DeviceRegion::zero(size_t bytes) const {
  if (bytes > size_) bytes = size_;
  if (bytes > 0) cuda_check(cudaMemset(ptr_, 0, bytes), label_, "cudaMemset to zero");
}

void DeviceRegion::swap(DeviceRegion& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(size_, o.size_);
  std::swap(label_, o.label_);
}

MappedHostRegion::MappedHostRegion(size_t bytes, const char* label, unsigned extra_flags) : MappedHostRegion() {
  cuda_check(cudaHostAlloc(&host_, bytes, cudaHostAllocMapped | extra_flags), label,
             "cudaHostAlloc (mapped) of " + std::to_string(bytes) + " bytes");
  size_ = bytes;
  std::memset(host_, 0, bytes);
  void* d = nullptr;
  cuda_check(cudaHostGetDevicePointer(&d, host_, 0), label, "cudaHostGetDevicePointer");
  dev_ = static_cast<uint8_t*>(d);
}

void MappedHostRegion::reset() noexcept {
  if (host_) cudaFreeHost(host_);
  host_ = nullptr;
  dev_ = nullptr;
  size_ = 0;
}

void MappedHostRegion::swap(MappedHostRegion& o) noexcept {
  std::swap(host_, o.host_);
  std::swap(dev_, o.dev_);
  std::swap(size_, o.size_);
}

}  // namespace anyep::runtime
