// anyep/src/runtime/common/region.h — owners of the runtime's GPU-visible memory: a device
// allocation (cudaMalloc) and pinned host memory mapped into the GPU (cudaHostAlloc, mapped).
// Each is move-only, records its size and frees its memory in its destructor (or reset()), so a
// buffer whose constructor throws half-way leaks nothing and its destroy() keeps only the steps
// whose order matters (docs/architecture.md). Errors are CudaError naming the region's label.
// Host code of GPU builds only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/gpu_runtime.h"

namespace anyep::runtime {

class DeviceRegion {
 public:
  DeviceRegion() = default;
  // `bytes` of device memory on the current device, zeroed when `zero`. `label` (a string
  // literal: kept, not copied) names the region in errors, e.g. "anyep LL buffer".
  DeviceRegion(size_t bytes, const char* label, bool zero = true);
  ~DeviceRegion() { reset(); }
  DeviceRegion(DeviceRegion&& o) noexcept { swap(o); }
  DeviceRegion& operator=(DeviceRegion&& o) noexcept {
    DeviceRegion(static_cast<DeviceRegion&&>(o)).swap(*this);
    return *this;
  }
  DeviceRegion(const DeviceRegion&) = delete;
  DeviceRegion& operator=(const DeviceRegion&) = delete;

  // Frees the memory now (teardown: cudaFree's status is not an error anyone can act on).
  void reset() noexcept;
  // Synchronous cudaMemset of the first `bytes` bytes (all of them by default) to zero.
  void zero(size_t bytes = SIZE_MAX) const;

  uint8_t* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(ptr_);
  }
  size_t size() const { return size_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void swap(DeviceRegion& o) noexcept;

 private:
  uint8_t* ptr_ = nullptr;
  size_t size_ = 0;
  const char* label_ = "";
};

class MappedHostRegion {
 public:
  MappedHostRegion() = default;
  // `bytes` of pinned host memory mapped into the GPU's address space (cudaHostAllocMapped, plus
  // `extra_flags`, e.g. cudaHostAllocPortable), zeroed on the host. `label` names it in errors
  // (used during construction only).
  MappedHostRegion(size_t bytes, const char* label, unsigned extra_flags = 0);
  ~MappedHostRegion() { reset(); }
  MappedHostRegion(MappedHostRegion&& o) noexcept { swap(o); }
  MappedHostRegion& operator=(MappedHostRegion&& o) noexcept {
    MappedHostRegion(static_cast<MappedHostRegion&&>(o)).swap(*this);
    return *this;
  }
  MappedHostRegion(const MappedHostRegion&) = delete;
  MappedHostRegion& operator=(const MappedHostRegion&) = delete;

  void reset() noexcept;

  // The host address, and the same memory as the GPU addresses it.
  void* host() const { return host_; }
  uint8_t* device() const { return dev_; }
  template <typename T>
  T* host_as() const {
    return static_cast<T*>(host_);
  }
  template <typename T>
  T* device_as() const {
    return reinterpret_cast<T*>(dev_);
  }
  size_t size() const { return size_; }
  explicit operator bool() const { return host_ != nullptr; }
  void swap(MappedHostRegion& o) noexcept;

 private:
  void* host_ = nullptr;
  uint8_t* dev_ = nullptr;
  size_t size_ = 0;
};

}  // namespace anyep::runtime
