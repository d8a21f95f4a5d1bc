// anyep/src/capi/ll_backend.h — what the C API needs from the LL runtime, behind an interface so
// that the C API also builds without CUDA (ll_backend_none.cpp: only GPU-free groups) and the
// CUDA-only runtime headers stay in ll_backend_cuda.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "capi/config.h"
#include "runtime/ll/validate.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::capi {

// The receive phase of a send-only call, launched later on a stream (a cudaStream_t).
using RecvPhase = std::function<void(void* stream)>;

class LLBackend {
 public:
  virtual ~LLBackend() = default;
  virtual runtime::LLBufferInfo info() const = 0;
  // Checks (runtime/ll/validate.h) and launches; send_only returns the receive phase, else null.
  virtual RecvPhase dispatch(const runtime::LLDispatchIn& in, const runtime::LLDispatchOut& out, bool send_only,
                             void* stream) = 0;
  virtual RecvPhase combine(const runtime::LLCombineIn& in, const runtime::TensorRef& out, bool send_only,
                            void* stream) = 0;
  // Throws the asynchronous error the kernels or the proxy reported, if any.
  virtual void check_async() = 0;
  // Waits for this rank's work on the device (before the barrier that precedes freeing).
  virtual void synchronize() = 0;
  virtual void destroy() = 0;
};

// Collective over `boot`: every rank allocates its LL buffer on `device` (a rank that cannot
// tells the others, who fail naming it instead of waiting) and connects. Without CUDA:
// Unsupported.
std::unique_ptr<LLBackend> make_ll_backend(const GroupSpec& spec, int device, transport::Bootstrap& boot);

// CUDA devices this process can use; 0 with *why set when none (or no CUDA in this build).
int device_count(std::string* why);
// The ordinal `requested` stands for (ANYEP_DEVICE_CURRENT: the calling thread's current device).
int resolve_device(int requested);
// Default allocator of handle memory: cudaMalloc / cudaFree on `device` (the caller's current
// device is left as it was).
void* device_alloc(size_t bytes, int device);
void device_free(void* p, int device);

}  // namespace anyep::capi
