// anyep/src/kernels/ht/kernels.h — high-throughput (intranode) entry points: the dispatch layout,
// the notify pass, dispatch and combine. Raw pointers and a stream only (no torch); the runtime
// (src/runtime/ht/buffer.h) checks the arguments and fills these structs. Buffer layout: ht/layout.h.
#pragma once

#include <cstdint>

#include "common/gpu_runtime.h"
#include "kernels/common/error_record.h"
#include "kernels/common/proxy_path.h"
#include "kernels/ht/layout.h"

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
  ErrorRecord* err = nullptr;       // device view of the host-mapped record
  uint64_t timeout_ns = 0;
};

struct LayoutArgs {
  const int64_t* topk_idx = nullptr;  // [N, K]
  int num_tokens = 0, num_topk = 0, num_experts = 0, num_ranks = 0;
  int32_t* num_tokens_per_rank = nullptr;    // [R] out
  int32_t* num_tokens_per_expert = nullptr;  // [E] out
  bool* is_token_in_rank = nullptr;          // [N, R] out
  ErrorRecord* err = nullptr;
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

// One step of the rail exchange of the internode path (ht/internode_protocol.h, "The rail
// exchange"). Commands go through the proxy's rings (ProxyPath: rings and host counters).
enum class NetStep : uint8_t {
  kWaitCredits,  // wait until every rail peer freed the previous call's block
  kSend,         // headers, WRITEs and fenced tail signals to every rail peer; wait for their blocks
  kCopyOut,      // copy every node's block (own: the send area) into `out`, ordered by node
  kRelease,      // one credit to every rail peer
};

struct NetArgs {
  ProxyPath proxy{};
  ErrorRecord* err = nullptr;
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

// ---- The internode composition (runtime/ht/internode.h) -----------------------------------
// Rows of the rail exchange are built from column segments of a call's tensors and taken apart
// into them again; combine's rows are summed per token at home. The exchange (NetArgs) never
// knows what a row holds; these kernels do.

// Which tokens go to which node in a dispatch: token t goes to node n, once, when one of its
// top-k experts is there (experts_per_node consecutive experts per node). Its row in node n's
// block is its rank among those tokens. An expert outside [-1, num_experts) is reported
// (kErrBadExpert) and skipped.
struct RouteArgs {
  const int64_t* topk_idx = nullptr;  // [N, K]
  int num_tokens = 0, num_topk = 0, nodes = 1;
  int64_t num_experts = 0, experts_per_node = 0;
  int32_t* pos = nullptr;        // [nodes, N] out: the token's row in node n's block; -1: not sent
  int64_t* send_rows = nullptr;  // [nodes] out: rows of each block
  ErrorRecord* err = nullptr;
  int rank = 0;
};

// One column segment of an exchange row: `words` 4-byte words. Word w of tensor row r lives at
// base + r * row_stride + w * word_stride (bytes; strided FP8 scales included), and at byte
// offset + 4 w of the exchange row. Unpacking int64 expert ids may renumber them for the node:
// ids in [renumber_base, renumber_base + renumber_span) become id - renumber_base, others -1.
struct RowSegment {
  uint8_t* base = nullptr;
  int64_t row_stride = 0, word_stride = 4;
  int32_t words = 0, offset = 0;
  int64_t renumber_base = 0, renumber_span = -1;  // span < 0: copy as is
};
inline constexpr int kMaxRowSegments = 4;

// Tensor rows -> the send area: row r goes to node n at row pos[n][r] (dispatch), or, with pos
// null, rows come node by node (node_rows[n] each, in order: combine's way back).
struct PackArgs {
  RowSegment seg[kMaxRowSegments];
  int num_segments = 0;
  int num_rows = 0;  // tensor rows
  int nodes = 1;
  const int32_t* pos = nullptr;        // [nodes, num_rows] or null
  const int64_t* node_rows = nullptr;  // [nodes] (pos null)
  uint64_t row_bytes = 0;              // exchange row, a multiple of 16
  uint8_t* send_area = nullptr;        // block n's first row at send_area + n * block_bytes
  uint64_t block_bytes = 0;
  int64_t capacity = 0;  // rows a block holds: rows past it are not written (the exchange reports them)
};

// Exchange rows ([num_rows, row_bytes], contiguous) -> tensor rows.
struct UnpackArgs {
  RowSegment seg[kMaxRowSegments];
  int num_segments = 0;
  int num_rows = 0;
  const uint8_t* rows = nullptr;
  uint64_t row_bytes = 0;
};

// Combine at home: out[t] = the sum over nodes n with pos[n][t] >= 0 of the BF16 row that node
// sent back (node n's rows start at the sum of send_rows[< n]), in float in node order, rounded
// to BF16 once (the biases added in float first); the float top-k weights at weights_offset are
// summed the same way.
struct HomeSumArgs {
  const uint8_t* rows = nullptr;  // [sum send_rows, row_bytes]
  uint64_t row_bytes = 0;
  const int32_t* pos = nullptr;        // [nodes, N]
  const int64_t* send_rows = nullptr;  // [nodes]
  int num_tokens = 0, nodes = 1, hidden = 0, num_topk = 0;
  uint64_t weights_offset = 0;
  const uint16_t* bias0 = nullptr;  // bf16 [N, hidden] or null: added in float before the rounding
  const uint16_t* bias1 = nullptr;
  uint16_t* out = nullptr;       // bf16 [N, hidden]
  float* out_weights = nullptr;  // [N, K] or null
};

#if ANYEP_HAVE_GPU_RUNTIME
cudaError_t launch_net(const NetArgs& a, NetStep step, cudaStream_t stream);
cudaError_t launch_route(const RouteArgs& a, cudaStream_t stream);
cudaError_t launch_pack(const PackArgs& a, cudaStream_t stream);
cudaError_t launch_unpack(const UnpackArgs& a, cudaStream_t stream);
cudaError_t launch_home_sum(const HomeSumArgs& a, cudaStream_t stream);
// Zeroes the outputs and counts on `stream`, then one pass over topk_idx. No sync.
cudaError_t launch_layout(const LayoutArgs& a, cudaStream_t stream);
// Barrier, counts to every peer, barrier, prefix sums; channel prefix sums in other blocks.
cudaError_t launch_notify(const NotifyArgs& a, cudaStream_t stream);
// A barrier alone (cached dispatch, combine): every rank's earlier HT kernels are done.
cudaError_t launch_barrier(const Ctx& x, cudaStream_t stream);
cudaError_t launch_dispatch(const DispatchArgs& a, cudaStream_t stream);
cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream);
// Each loads its file's kernels now (kernels/preload.h says why).
cudaError_t preload_net();
cudaError_t preload_internode();
cudaError_t preload_layout();
cudaError_t preload_notify();
cudaError_t preload_dispatch();
cudaError_t preload_combine();
#endif

}  // namespace anyep::ht
