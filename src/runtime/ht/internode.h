// anyep/src/runtime/ht/internode.h — the internode high-throughput path (docs/ht.md,
// "Internode"), for the Python extension and the C API alike: the rail exchange (HTNet, through
// the CPU proxy) composed with the node's intranode buffer (HTBuffer over the node's k ranks,
// direct stores), and the kernels that build the exchange's rows from a call's tensors and take
// them apart (kernels/ht/internode.cu).
//
// A pass, in stream order on every rank:
//  route_send()    which node each token goes to; its top-k ids cross the rail exchange; the host
//                  waits (polling) for the rows this rank forwards and sent;
//  route_finish()  the ids unpacked into the caller's tables (now sized for those rows), the
//                  node's layout and counts exchange (the host waits for the counts unless
//                  num_worst_tokens);
//  dispatch()      x, its scales and weights cross the exchange along the same routes, then the
//                  node's dispatch forwards them (no host wait); cached_dispatch() the same for x
//                  and its scales, on an earlier pass's routes;
//  combine()       the node's combine sums a token's rows on the rank that forwarded it (BF16), the
//                  exchange takes them home, home sums the nodes' rows in float, adds the biases,
//                  rounds to BF16 once.
// The tables of a pass are the caller's; the exchange's output rows and the node stage's inputs
// are this object's scratch, grown (never shrunk) in route_send while no exchange is in flight:
// a group's calls run one after another in stream order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu_runtime.h"
#include "runtime/common/region.h"
#include "runtime/ht/buffer.h"
#include "runtime/ht/internode_plan.h"
#include "runtime/ht/net.h"
#include "runtime/ht/validate.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::runtime {

class HTInternode {
 public:
  // `nvl_bytes` for the node's intranode buffer, `rdma_bytes` for the exchange region.
  HTInternode(int rank, int num_ranks, int ranks_per_node, int64_t nvl_bytes, int64_t rdma_bytes, int device);
  ~HTInternode();
  HTInternode(const HTInternode&) = delete;
  HTInternode& operator=(const HTInternode&) = delete;

  // The node buffer's connection record; connect() takes every rank's (the node's are used), then
  // connects the rail exchange over `boot` (collective).
  std::vector<uint8_t> local_info() const { return node_->local_info(); }
  void connect(const std::vector<std::vector<uint8_t>>& infos, transport::Bootstrap& boot);
  std::string describe_paths() const;

  int nodes() const { return net_->nodes(); }
  int ranks_per_node() const { return k_; }
  HTBufferInfo node_info() const { return node_->info(); }
  int device() const { return device_; }
  // Grows the scratch for passes of up to `forward_rows` rows (a caller that knows its shape
  // allocates at set-up instead of in the first pass).
  void reserve(int64_t forward_rows, const HTInternodeRows& rows);

  HTInternodeCounts route_send(const TensorRef& topk_idx, int64_t num_experts, const HTInternodeRows& rows,
                               const HTInternodeTables& t, cudaStream_t stream);
  HTInternodeRoute route_finish(const HTInternodeCounts& c, const HTInternodeTables& t, const HTConfig& dispatch_config,
                                int64_t expert_alignment, int64_t num_worst_tokens, cudaStream_t stream);
  // Outputs: ht_dispatch_outputs(r.node_plan, r.num_recv, node_info()); rcpm, send_head, src_idx
  // are the tables'.
  void dispatch(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x, const TensorRef& x_scales,
                const TensorRef& topk_weights, const HTDispatchOut& out, cudaStream_t stream);
  // recv_x [num_recv, H] and (FP8) recv_x_scales, rows as the pass's dispatch delivered them. x
  // may have another dtype than the pass's dispatch (FP8 with its scales, or BF16), as in DeepEP.
  void cached_dispatch(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x,
                       const TensorRef& x_scales, const TensorRef& recv_x, const TensorRef& recv_x_scales,
                       cudaStream_t stream);
  // x: BFloat16 [num_recv, H]; topk_weights Float [num_recv, K] or absent; biases BFloat16 [N, H]
  // or absent. out BFloat16 [N, H]; out_weights Float [N, K] with topk_weights.
  void combine(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x, const TensorRef& topk_weights,
               const TensorRef& bias0, const TensorRef& bias1, const HTConfig& combine_config, const TensorRef& out,
               const TensorRef& out_weights, cudaStream_t stream);

  void check_error() const;
  void destroy();

 private:
  void ready() const;
  // The node dispatch's inputs: the stage rows (x, scales, weights) and the pass's node tables.
  HTDispatchIn node_input(const HTInternodeRoute& r, const HTInternodeRows& rows, const HTInternodeTables& t) const;
  // The rows of a dispatch's x and scales, checked against the pass.
  HTInternodeRows rows_of(const HTInternodeRoute& r, const TensorRef& x, const TensorRef& x_scales) const;
  uint8_t* stage_scales() const;
  uint8_t* stage_weights() const;
  // The host copy of `n` int64 at `src` once the stream reaches it, by polling an event: a host
  // thread blocked in a CUDA call would stall the proxy's copies on the cuda-ipc transport.
  std::vector<int64_t> to_host(const int64_t* src, int n, cudaStream_t stream, const char* what);
  // One rail exchange: begin, `pack` (nodes and addresses filled here) into the send area, send;
  // the caller finishes it (finish_exchange) once the output rows have room.
  void send_exchange(const int64_t* send_rows, const int64_t* expect_rows, ht::PackArgs pack, uint64_t row_bytes,
                     cudaStream_t stream);
  void finish_exchange(uint64_t row_bytes, cudaStream_t stream);
  void unpack(const ht::RowSegment* seg, int n, int64_t rows, uint64_t row_bytes, cudaStream_t stream);

  int rank_, num_ranks_, k_, device_;
  std::unique_ptr<HTNet> net_;
  std::unique_ptr<HTBuffer> node_;
  // Scratch: the exchange's output rows; the node stage's rows (x | scales | weights areas of
  // stage_rows_ rows each, or combine's BF16 rows and weights).
  DeviceRegion rows_;
  DeviceRegion stage_;
  int64_t stage_rows_ = 0;
  uint64_t stage_x_ = 0, stage_s_ = 0;  // bytes per row of the x and scales areas
  DeviceRegion counts_;                 // int64 [2 * kMaxNodes]: rows of the last exchange per node
  MappedHostRegion host_;               // int64 [2 * kMaxNodes]: their host copy
  cudaEvent_t event_ = nullptr;
  uint64_t timeout_ns_ = 0;
  bool destroyed_ = false;
};

}  // namespace anyep::runtime
