// anyep/src/capi/objects.h — what the C API's opaque handles stand for: a group (its checked
// configuration, bootstrap, LL and HT backends) and a per-forward-pass handle (the routing, the
// handle memory dispatch fills and combine reads, the staged receive phase; for HT the layout,
// the counts and the tables the dispatch leaves for the combine).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "capi/config.h"
#include "capi/ht_backend.h"
#include "capi/ht_options.h"
#include "capi/ll_backend.h"
#include "capi/registry.h"
#include "runtime/common/tensor_ref.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::capi {

struct Group {
  GroupSpec spec;
  int device = ANYEP_DEVICE_NONE;  // resolved ordinal, or ANYEP_DEVICE_NONE
  std::unique_ptr<transport::Bootstrap> boot;
  std::unique_ptr<LLBackend> ll;  // null in a GPU-free group or without LL in the mode
  std::unique_ptr<HTBackend> ht;  // null in a GPU-free group or without HT in the mode
  int ht_ranks = 0;               // with HT: the ranks of a node (num_ranks: all on one node)
  bool internode() const { return ht_ranks > 0 && ht_ranks < spec.num_ranks; }
  // The HT handle whose counts were exchanged and whose dispatch has not run: the HT protocol
  // needs that dispatch to be the group's next HT call on every rank (0: none).
  uint64_t ht_awaiting_dispatch = 0;
  bool destroyed = false;

  // What the runtime's checks know of the buffer. A GPU-free group has no device: its checks
  // take `device` as the group's (the tensors of a call must still agree with each other).
  runtime::LLBufferInfo info(int device_of_call) const;
  // InvalidArgument once the group was destroyed (through a handle that outlived it).
  void expect_live() const;
  // InvalidArgument naming cfg->mode when the group was created without `mode` (LL or HT) in it.
  void expect_mode(anyep_mode_t mode) const;
};

// An HT handle's state. Its device memory (Handle::memory) holds, in this order: the layout
// (num_tokens_per_rank [R], num_tokens_per_expert [E], is_token_in_rank [N, R]), the tables
// (rank_prefix_matrix [R, R], channel_prefix_matrix and recv_channel_prefix_matrix [R, C],
// send_head [N, R]) and recv_src_idx for the most rows a rank can receive (R * T).
//
// Internode (the group's ranks on several nodes), the memory holds the pass's tables instead
// (runtime::HTInternodeTables: the node routing, then the node's intranode tables over k ranks).
struct HTState {
  HTOptions options;
  runtime::TensorRef ntpr, ntpe, itir, rpm, cpm, rcpm, send_head, src_idx;
  runtime::HTInternodeTables net;   // internode
  runtime::HTInternodeRoute route;  // internode: what the routing found (GPU groups)
  runtime::HTDispatchPlan plan;     // the plan the counts were exchanged for
  int64_t num_recv = -1;            // M; -1 in a GPU-free group (no counts)
  std::vector<int> per_expert;      // aligned rows per local expert
  uint64_t scale_cols = 0;          // FP8: x_scales columns (H/128 float32, H/512 int32 with UE8M0)
  runtime::DType scale_dtype = runtime::DType::kOther;
};

struct Handle {
  std::shared_ptr<Group> group;
  anyep_mode_t mode = ANYEP_MODE_LL;
  runtime::TensorRef topk_idx;
  int64_t num_tokens = 0, num_topk = 0;
  // Handle memory (ll/layout.h, "Handle storage", then layout_range): null in a GPU-free group.
  void* memory = nullptr;
  size_t memory_bytes = 0;
  runtime::TensorRef src_info, layout_range;  // views of `memory` the runtime fills and reads
  bool dispatched = false;                    // a dispatch was launched (combine may follow)
  RecvPhase pending;                          // the staged receive phase, if any
  const char* pending_what = nullptr;         // "dispatch" or "combine"
  std::unique_ptr<HTState> ht;                // HT handles only

  ~Handle();
};

Registry<Group>& groups();
Registry<Handle>& handles();
// The live handle behind `handle`, its group live; InvalidArgument otherwise. With `mode`, the
// handle must be of it (`call` names the refused call).
std::shared_ptr<Handle> live_handle(anyep_handle_t handle);
std::shared_ptr<Handle> live_handle(anyep_handle_t handle, anyep_mode_t mode, const char* call);

// The modes behind the C API's mode-generic handle calls (handle.cpp: LL; ht_handle.cpp: HT). The
// arguments are the caller's; anyep_handle_create, anyep_dispatch and anyep_combine have checked
// the mode and that the other mode's fields are unset.
std::shared_ptr<Handle> ll_create(std::shared_ptr<Group> group, const anyep_tensor_t* topk_idx);
std::shared_ptr<Handle> ht_create(std::shared_ptr<Group> group, const anyep_tensor_t* topk_idx,
                                  const anyep_ht_options_t* options, void* stream);
void ll_dispatch(Handle& h, const anyep_dispatch_args_t& a);
void ll_combine(Handle& h, const anyep_combine_args_t& a);
void ht_dispatch(Handle& h, uint64_t id, const anyep_dispatch_args_t& a);
void ht_combine(Handle& h, const anyep_combine_args_t& a);
// topk_idx's rows against the group's max_tokens_per_rank (what the runtime does not know).
void check_routing_rows(const Handle& h);
// Handle memory from the group's allocator (or cudaMalloc), freed by ~Handle.
void alloc_handle_memory(Handle& h, size_t bytes, int device);

// Opaque handle values <-> registry ids.
inline uint64_t id_of(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }
template <typename T>
T* as_opaque(uint64_t id) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(id));
}

}  // namespace anyep::capi
