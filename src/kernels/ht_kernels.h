// anyep/src/kernels/ht_kernels.h — high-throughput (intranode) entry points: the dispatch layout,
// the notify pass, dispatch and combine. Raw pointers and a stream only (no torch); the runtime
// (src/runtime/ht_api.h) checks the arguments and fills these structs. Buffer layout: ht_layout.h.
#pragma once

#include <cstdint>

#include "common/gpu_runtime.h"
#include "kernels/ht_layout.h"
#include "kernels/ll_kernels.h"  // ErrorRecord

namespace anyep::ht {

// HT error codes continue the LL numbering in the shared ErrorRecord.
enum ErrorCode : uint32_t {
  kErrBarrierTimeout = 32,  // rank `peer` did not reach the HT barrier
  kErrRecvTimeout = 33,     // dispatch/combine receiver waited for ring (value = channel) of `peer`
  kErrSendTimeout = 34,     // sender waited for space in its ring (value = channel) at `peer`
  kErrWorstTooSmall = 35,   // num_worst_tokens (expert) < tokens received (value)
  kErrBadExpert = 36,       // topk_idx entry (expert) outside [-1, E), token `value`
  kErrCountsMismatch = 37,  // a ring delivered a range that disagrees with the notify counts
  // The rail exchange of the internode path (expert = node, peer = its rail peer):
  kErrNetTimeout = 38,   // waited for `peer`'s credit (value 0) or its block (value 1)
  kErrNetOverflow = 39,  // a block of `value` rows does not fit the exchange region's block
  kErrNetHeader = 40,    // a received block's header disagrees with the call (value: its rows)
};

// What every HT kernel knows of the buffer.
struct Ctx {
  int rank = 0;
  int R = 0;
  uint8_t* local = nullptr;         // this rank's HT region
  uint8_t* const* peers = nullptr;  // device array [R]: every rank's HT region (CUDA IPC)
  ll::ErrorRecord* err = nullptr;   // device view of the host-mapped record
  uint64_t timeout_ns = 0;
};

struct LayoutArgs {
  const int64_t* topk_idx = nullptr;  // [N, K]
  int num_tokens = 0, num_topk = 0, num_experts = 0, num_ranks = 0;
  int32_t* num_tokens_per_rank = nullptr;    // [R] out
  int32_t* num_tokens_per_expert = nullptr;  // [E] out
  bool* is_token_in_rank = nullptr;          // [N, R] out
  ll::ErrorRecord* err = nullptr;
  int rank = 0;
};

struct NotifyArgs {
  Ctx x;
  Geometry g;
  int num_tokens = 0;
  int num_local_experts = 0;                       // L (0 in a cached call)
  const int32_t* num_tokens_per_rank = nullptr;    // [R]
  const int32_t* num_tokens_per_expert = nullptr;  // [E]
  const bool* is_token_in_rank = nullptr;          // [N, R]
  int expert_alignment = 1;
  int32_t* rank_prefix_matrix = nullptr;     // [R, R] out
  int32_t* channel_prefix_matrix = nullptr;  // [R, C] out
  // Host-mapped (pinned) counters the host waits on: total received, then per local expert
  // (aligned), each -1 until written. Device views.
  volatile int32_t* recv_counter = nullptr;
  volatile int32_t* recv_expert_counter = nullptr;  // [L]
};

struct DispatchArgs {
  Ctx x;
  Geometry g;
  int num_tokens = 0, num_topk = 0, num_local_experts = 0;
  int64_t x_bytes = 0;                                                  // bytes per token row (multiple of 16)
  int num_scales = 0, scale_token_stride = 0, scale_hidden_stride = 0;  // in elements (4 bytes)
  const uint8_t* x_data = nullptr;                                      // [N, x_bytes]
  const uint8_t* x_scales = nullptr;                                    // 4-byte elements, strided
  const int64_t* topk_idx = nullptr;                                    // [N, K] or null
  const float* topk_weights = nullptr;
  const bool* is_token_in_rank = nullptr;
  const int32_t* channel_prefix_matrix = nullptr;  // [R, C]
  const int32_t* rank_prefix_matrix = nullptr;     // [R, R]
  int num_recv_capacity = 0;                       // rows of the outputs (exact count, or num_worst_tokens)
  bool worst = false;                // outputs sized num_worst_tokens: fill the rest of recv_topk_idx with -1
  uint8_t* recv_x = nullptr;         // [M, x_bytes]
  uint8_t* recv_scales = nullptr;    // [M, num_scales] row-major 4-byte
  int32_t* recv_src_idx = nullptr;   // [M]
  int64_t* recv_topk_idx = nullptr;  // [M, K]
  float* recv_topk_weights = nullptr;
  int32_t* recv_channel_prefix_matrix = nullptr;  // [R, C]
  int32_t* send_head = nullptr;                   // [N, R]
};

struct CombineArgs {
  Ctx x;
  Geometry g;
  int num_recv = 0;    // rows of x (this rank's received tokens, worst-case count allowed)
  int num_tokens = 0;  // rows of the output (tokens this rank dispatched)
  int hidden = 0, num_topk = 0;
  const uint16_t* x_data = nullptr;     // bf16 [num_recv, H]
  const float* topk_weights = nullptr;  // [num_recv, K] or null
  const uint16_t* bias0 = nullptr;      // bf16 [N, H] or null
  const uint16_t* bias1 = nullptr;
  const int32_t* rank_prefix_matrix = nullptr;          // [R, R]
  const int32_t* recv_channel_prefix_matrix = nullptr;  // [R, C]
  const int32_t* send_head = nullptr;                   // [N, R]
  uint16_t* out = nullptr;                              // bf16 [N, H]
  float* out_topk_weights = nullptr;                    // [N, K] or null
};

// One step of the rail exchange of the internode path (ht_internode_protocol.h, "The rail
// exchange"). Commands go through the LL proxy's rings (ll::ProxyPath: rings and host counters).
enum class NetStep : uint8_t {
  kWaitCredits,  // wait until every rail peer freed the previous call's block
  kSend,         // headers, WRITEs and fenced tail signals to every rail peer; wait for their blocks
  kCopyOut,      // copy every node's block (own: the send area) into `out`, ordered by node
  kRelease,      // one credit to every rail peer
};

struct NetArgs {
  ll::ProxyPath proxy{};
  ll::ErrorRecord* err = nullptr;
  uint8_t* local = nullptr;  // this rank's exchange region (device view)
  bool host_mem = false;     // the region is pinned host memory (a NIC writes it)
  int rank = 0, R = 0, ranks_per_node = 1, nodes = 1;
  uint64_t bytes = 0;  // the region's size
  uint64_t seq = 0;    // this exchange's number, from 1
  uint64_t timeout_ns = 0;
  uint64_t row_bytes = 0;                // multiple of 16
  const int64_t* send_rows = nullptr;    // [nodes] rows of each send block (kSend)
  const int64_t* expect_rows = nullptr;  // [nodes] rows each block must hold, or null (kSend)
  int64_t* recv_rows = nullptr;          // [nodes] rows of each node's block here (kSend out, kCopyOut in)
  uint8_t* out = nullptr;                // [sum recv_rows, row_bytes] (kCopyOut)
};

#if ANYEP_HAVE_GPU_RUNTIME
cudaError_t launch_net(const NetArgs& a, NetStep step, cudaStream_t stream);
// Zeroes the outputs and counts on `stream`, then one pass over topk_idx. No sync.
cudaError_t launch_layout(const LayoutArgs& a, cudaStream_t stream);
// Barrier, counts to every peer, barrier, prefix sums; channel prefix sums in other blocks.
cudaError_t launch_notify(const NotifyArgs& a, cudaStream_t stream);
// A barrier alone (cached dispatch, combine): every rank's earlier HT kernels are done.
cudaError_t launch_barrier(const Ctx& x, cudaStream_t stream);
cudaError_t launch_dispatch(const DispatchArgs& a, cudaStream_t stream);
cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream);
#endif

}  // namespace anyep::ht
