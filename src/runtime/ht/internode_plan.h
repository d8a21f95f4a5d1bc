// anyep/src/runtime/ht/internode_plan.h — what one pass of the internode HT path
// (ht/internode.h) is made of: the rows it moves, the pass's tables (the caller's memory) and what
// its routing found. Plain C++ (no CUDA): the C API's handle keeps these in builds without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ht/internode_protocol.h"
#include "runtime/common/tensor_ref.h"
#include "runtime/ht/validate.h"

namespace anyep::runtime {

// Nodes the rail exchange reaches (a bit per node in its masks).
inline constexpr int kHTMaxNodes = ht::internode::kMaxNodes;

// What a pass's rows carry besides the top-k: tokens of `hidden` elements of x_dtype (BF16, or
// FP8 with scale_cols 4-byte scales of scale_dtype per token).
struct HTInternodeRows {
  int64_t hidden = 0;
  DType x_dtype = DType::kBFloat16;
  DType scale_dtype = DType::kOther;
  int64_t scale_cols = 0;
};

// The rows of an internode dispatch, from its x ([N, hidden]), FP8 scales ([N, scale_cols], or
// absent) and topk_idx ([N, num_topk]): what the pass's tables are sized by before route_send.
// Throws InvalidArgument naming the argument; the pass's calls check dtypes and devices.
HTInternodeRows ht_internode_rows(const TensorRef& x, const TensorRef& x_scales, const TensorRef& topk_idx);
// The channels of the node stage's dispatch (the columns of the pass's cpm table) for a pass's
// rows, num_topk, the node's ranks and the dispatch Config; throws InvalidArgument naming the
// Config when it makes no ring geometry.
int64_t ht_internode_node_channels(const HTInternodeRows& rows, int64_t num_topk, int ranks_per_node,
                                   const HTConfig& config);

// Bytes of one exchange row: the top-k ids of the routing; x, scales and weights of a dispatch;
// the BF16 row and weights of a combine. Multiples of 16.
uint64_t ht_route_row_bytes(int64_t num_topk);
uint64_t ht_dispatch_row_bytes(const HTInternodeRows& rows, int64_t num_topk);
uint64_t ht_combine_row_bytes(const HTInternodeRows& rows, int64_t num_topk);
// The exchange region (num_rdma_bytes) for `max_tokens` per rank to every one of `nodes` nodes
// (the worst case), top-k up to 16.
int64_t ht_internode_region_bytes(const HTInternodeRows& rows, int64_t max_tokens, int nodes);

// A pass's tables (the caller's device memory). Before route_send: pos, send_rows, recv_rows.
// Before route_finish, with M1 = HTInternodeCounts::forward_rows (at least that many rows):
// topk_node, ntpr, ntpe, itir, rpm, cpm. The node dispatch fills rcpm, send_head and src_idx.
struct HTInternodeTables {
  TensorRef pos;        // Int [nodes, N]: a token's row in each node's block, -1: not sent there
  TensorRef send_rows;  // Long [nodes]
  TensorRef recv_rows;  // Long [nodes]
  TensorRef topk_node;  // Long [M1, K]: the forwarded tokens' top-k ids, numbered inside the node
  // The node's intranode tables (k ranks).
  TensorRef ntpr;       // Int [k]
  TensorRef ntpe;       // Int [k * L]
  TensorRef itir;       // Bool [M1, k]
  TensorRef rpm;        // Int [k, k]
  TensorRef cpm, rcpm;  // Int [k, C]
  TensorRef send_head;  // Int [M1, k]
  TensorRef src_idx;    // Int [num_recv]
};

// What route_send found: the rows this rank forwards inside its node (M1) and sent out.
struct HTInternodeCounts {
  int64_t num_tokens = 0, num_topk = 0, num_experts = 0;
  HTInternodeRows rows;
  int64_t forward_rows = 0;  // M1: rows the rail peers sent here, node by node
  int64_t sent_rows = 0;     // rows this rank sent, node by node (combine brings as many back)
  int64_t most_sent = 0;     // the most rows sent to one node (a block's rows in a dispatch)
};

// What route_finish found: the node's counts and its dispatch's plan (x of M1 rows).
struct HTInternodeRoute : HTInternodeCounts {
  int64_t num_recv = 0;         // rows this rank receives (num_worst_tokens when given)
  std::vector<int> per_expert;  // per local expert (aligned; empty with num_worst_tokens)
  HTConfig dispatch_config;
  int64_t expert_alignment = 1, num_worst_tokens = 0;
  HTDispatchPlan node_plan;
};

}  // namespace anyep::runtime
