// anyep/src/runtime/ht_internode.h — the internode high-throughput path in C++ (docs/ht.md,
// "Internode"), as the C API runs it: the rail exchange (HTNet, through the proxy) composed with
// the node's intranode buffer (HTBuffer over the node's k ranks, direct stores), and the kernels
// that build the exchange's rows from a call's tensors and take them apart (kernels/ht_internode.cu).
//
// A forward pass, in stream order on every rank:
//  route()    which node each token goes to; the top-k ids cross the rail exchange (the host waits
//             for the rows this rank will forward); the node's layout and counts exchange (the host
//             waits for the rows this rank receives): the counts of the pass, before any data moves;
//  dispatch() x, its scales and weights cross the rail exchange to the routed rows, then the
//             node's dispatch forwards them to the ranks that host their experts;
//  combine()  the node's combine sums a token's rows on the rank that forwarded it, the exchange
//             takes them home, home sums the nodes' rows in float and rounds to BF16 once.
// The per-pass tables live in the caller's memory (HTInternodeTables); the scratch rows between
// the stages are this object's, so a group's calls run one after another in stream order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu_runtime.h"
#include "runtime/ht_buffer.h"
#include "runtime/ht_internode_plan.h"
#include "runtime/ht_net.h"
#include "runtime/ht_validate.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::runtime {

class HTInternode {
 public:
  // `nvl_bytes` for the node's intranode buffer; the exchange region is sized for the worst case
  // (every token to every node).
  HTInternode(int rank, int num_ranks, int ranks_per_node, int64_t nvl_bytes, const HTInternodeShape& shape,
              int device);
  ~HTInternode();
  HTInternode(const HTInternode&) = delete;
  HTInternode& operator=(const HTInternode&) = delete;

  // The node buffer's connection record (allgathered by the caller over all ranks), then
  // connect() with every rank's record: the node's are used; the rail exchange connects over
  // `boot` (collective).
  std::vector<uint8_t> local_info() const { return node_->local_info(); }
  void connect(const std::vector<std::vector<uint8_t>>& infos, transport::Bootstrap& boot);
  std::string describe_paths() const;

  int nodes() const { return net_->nodes(); }
  int ranks_per_node() const { return net_->ranks_per_node(); }
  int64_t max_forward_rows() const { return int64_t(nodes()) * shape_.max_tokens; }
  HTBufferInfo node_info() const { return node_->info(); }
  int device() const { return device_; }
  // Bytes of the exchange region the shape needs (what the constructor allocates).
  static int64_t exchange_bytes(const HTInternodeShape& shape, int nodes);

  HTInternodeRoute route(const TensorRef& topk_idx, const HTInternodeTables& t, const HTConfig& dispatch_config,
                         int64_t expert_alignment, cudaStream_t stream);
  // The pass's dispatch (once per route, the node's next HT call). Outputs as the node dispatch's:
  // ht_dispatch_outputs(r.node_plan, r.num_recv, node_info()). `dispatch_config` and
  // `expert_alignment` as given to route().
  void dispatch(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x, const TensorRef& x_scales,
                const TensorRef& topk_weights, const HTConfig& dispatch_config, int64_t expert_alignment,
                const HTDispatchOut& out, cudaStream_t stream);
  // x: BFloat16 [num_recv, H]; topk_weights: Float [num_recv, K] or absent. out: BFloat16 [N, H];
  // out_weights: Float [N, K] with topk_weights (combine_outputs says which).
  void combine(const HTInternodeRoute& r, const HTInternodeTables& t, const TensorRef& x, const TensorRef& topk_weights,
               const HTConfig& combine_config, const TensorRef& out, const TensorRef& out_weights, cudaStream_t stream);
  static OutputSpec combine_output(const HTInternodeRoute& r, int64_t hidden);
  static OutputSpec combine_output_weights(const HTInternodeRoute& r);

  void check_error() const;
  void destroy();

 private:
  void ready() const;
  uint64_t dispatch_row_bytes(int64_t K) const;
  uint64_t combine_row_bytes(int64_t K) const;
  // The node dispatch's inputs: the stage rows (x, scales, weights) and the pass's node tables.
  HTDispatchIn node_input(const HTInternodeTables& t, int64_t m1, int64_t K, const HTConfig& config,
                          int64_t expert_alignment) const;
  // The host copy of `n` int64 at `src` once the stream reaches it, by polling an event: a host
  // thread blocked in a CUDA call would stall the proxy's copies on the cuda-ipc transport.
  std::vector<int64_t> to_host(const int64_t* src, int n, cudaStream_t stream, const char* what);
  // One rail exchange: begin, `pack` (nodes and addresses filled here) into the send area, send,
  // rows out into rows_ node by node (their counts in counts_), credits back.
  void exchange(const int64_t* send_rows, const int64_t* expect_rows, ht::PackArgs pack, uint64_t row_bytes,
                cudaStream_t stream);

  int rank_, num_ranks_, k_, device_;
  HTInternodeShape shape_;
  std::unique_ptr<HTNet> net_;
  std::unique_ptr<HTBuffer> node_;
  uint8_t* rows_ = nullptr;    // exchange output: [nodes * T, the widest row]
  uint8_t* stage_ = nullptr;   // the node stage's inputs (x, scales, weights) or outputs (x, weights)
  int64_t* counts_ = nullptr;  // device [kMaxNodes]: rows of the last exchange per node
  int64_t* host_ = nullptr;    // pinned [kMaxNodes]
  cudaEvent_t event_ = nullptr;
  uint64_t timeout_ns_ = 0;
  bool destroyed_ = false;
};

}  // namespace anyep::runtime
