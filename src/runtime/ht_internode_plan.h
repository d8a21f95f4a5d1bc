// anyep/src/runtime/ht_internode_plan.h — what the internode HT path (ht_internode.h) is built
// for and what one pass of it leaves behind: its shape, the pass's tables (in the caller's
// memory) and what the routing found. Plain C++ (no CUDA): the C API's handle keeps these in
// builds without a GPU too.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ht_internode_protocol.h"
#include "runtime/ht_validate.h"
#include "runtime/tensor_ref.h"

namespace anyep::runtime {

// Nodes the rail exchange reaches (a bit per node in its masks).
inline constexpr int kHTMaxNodes = ht::internode::kMaxNodes;

// Fixed at construction: sizes the exchange region and the scratch rows.
struct HTInternodeShape {
  int64_t max_tokens = 0;  // T: most tokens a rank dispatches in one call
  int64_t hidden = 0;      // H
  DType x_dtype = DType::kBFloat16;
  DType scale_dtype = DType::kOther;  // FP8: kFloat32 (H/128) or kInt32 (packed UE8M0, H/512)
  int64_t scale_cols = 0;
  int64_t num_experts = 0;
};

// A pass's tables (the caller's device memory; every shape is the largest a pass can need, with
// rows = nodes * T: the most rows a rank can forward).
struct HTInternodeTables {
  TensorRef pos;        // Int [nodes, N]: a token's row in each node's block, -1: not sent there
  TensorRef send_rows;  // Long [nodes]
  TensorRef recv_rows;  // Long [nodes]
  TensorRef topk_node;  // Long [rows, K]: the forwarded tokens' top-k ids, numbered inside the node
  // The node's intranode tables (k ranks).
  TensorRef ntpr;       // Int [k]
  TensorRef ntpe;       // Int [k * L]
  TensorRef itir;       // Bool [rows, k]
  TensorRef rpm;        // Int [k, k]
  TensorRef cpm, rcpm;  // Int [k, C]
  TensorRef send_head;  // Int [rows, k]
  TensorRef src_idx;    // Int [k * rows]
};

// What route() found: the rows this rank forwards (m1) and receives, and the node's plan.
struct HTInternodeRoute {
  int64_t num_tokens = 0, num_topk = 0;
  int64_t forward_rows = 0;     // m1
  int64_t num_recv = 0;         // the node's counts: rows this rank receives,
  std::vector<int> per_expert;  // and per local expert (aligned)
  HTDispatchPlan node_plan;     // the node dispatch's plan (x of m1 rows)
};

}  // namespace anyep::runtime
