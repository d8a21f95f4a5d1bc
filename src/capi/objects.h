// anyep/src/capi/objects.h — what the C API's opaque handles stand for: a group (its checked
// configuration, bootstrap and LL backend) and a per-forward-pass handle (the routing, the
// handle memory dispatch fills and combine reads, the staged receive phase).
#pragma once

#include <cstdint>
#include <memory>

#include "capi/config.h"
#include "capi/ll_backend.h"
#include "capi/registry.h"
#include "runtime/tensor_ref.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::capi {

struct Group {
  GroupSpec spec;
  int device = ANYEP_DEVICE_NONE;  // resolved ordinal, or ANYEP_DEVICE_NONE
  std::unique_ptr<transport::Bootstrap> boot;
  std::unique_ptr<LLBackend> ll;  // null in a GPU-free group
  bool destroyed = false;

  // What the runtime's checks know of the buffer. A GPU-free group has no device: its checks
  // take `device` as the group's (the tensors of a call must still agree with each other).
  runtime::LLBufferInfo info(int device_of_call) const;
  // InvalidArgument once the group was destroyed (through a handle that outlived it).
  void expect_live() const;
};

struct Handle {
  std::shared_ptr<Group> group;
  anyep_mode_t mode = ANYEP_MODE_LL;
  runtime::TensorRef topk_idx;
  int64_t num_tokens = 0, num_topk = 0;
  // Handle memory (ll_layout.h, "Handle storage", then layout_range): null in a GPU-free group.
  void* memory = nullptr;
  size_t memory_bytes = 0;
  runtime::TensorRef src_info, layout_range;  // views of `memory` the runtime fills and reads
  bool dispatched = false;                    // a dispatch was launched (combine may follow)
  RecvPhase pending;                          // the staged receive phase, if any
  const char* pending_what = nullptr;         // "dispatch" or "combine"

  ~Handle();
};

Registry<Group>& groups();
Registry<Handle>& handles();

// Opaque handle values <-> registry ids.
inline uint64_t id_of(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }
template <typename T>
T* as_opaque(uint64_t id) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(id));
}

}  // namespace anyep::capi
