// anyep/src/capi/ht_backend.h — what the C API needs from the HT runtime (runtime/ht/buffer.h),
// behind an interface so that the C API builds without CUDA (ll_backend_none.cpp) and the CUDA
// headers stay in ht_backend_cuda.cpp. Each call re-checks its outputs (runtime/common/check.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "capi/config.h"
#include "runtime/ht/internode_plan.h"
#include "runtime/ht/validate.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::capi {

struct HTCounts {
  int64_t num_recv = 0;         // rows this rank receives
  std::vector<int> per_expert;  // per local expert, aligned
};

// The outputs of a dispatch (runtime::HTDispatchOut without the CUDA header).
struct HTOutputs {
  runtime::TensorRef recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, recv_channel_prefix_matrix, recv_src_idx,
      send_head;
};

class HTBackend {
 public:
  virtual ~HTBackend() = default;
  virtual runtime::HTBufferInfo info() const = 0;
  virtual void layout(const runtime::HTLayoutIn& in, const runtime::HTLayoutPlan& p,
                      const runtime::TensorRef& num_tokens_per_rank, const runtime::TensorRef& num_tokens_per_expert,
                      const runtime::TensorRef& is_token_in_rank, void* stream) = 0;
  // Launches the counts exchange and waits on the host for this rank's counts.
  virtual HTCounts notify(const runtime::HTDispatchIn& in, const runtime::HTDispatchPlan& p,
                          const runtime::TensorRef& rank_prefix_matrix, const runtime::TensorRef& channel_prefix_matrix,
                          void* stream) = 0;
  virtual void dispatch(const runtime::HTDispatchIn& in, const runtime::HTDispatchPlan& p, int64_t num_recv,
                        const runtime::TensorRef& rank_prefix_matrix, const runtime::TensorRef& channel_prefix_matrix,
                        const HTOutputs& out, void* stream) = 0;
  virtual void combine(const runtime::HTCombineIn& in, const runtime::HTCombinePlan& p, const runtime::TensorRef& out,
                       const runtime::TensorRef& out_weights, void* stream) = 0;
  // Ranks on several nodes (runtime/ht/internode.h): info() is the node buffer's (its k ranks);
  // a pass is route() (the counts, before any data moves), then one dispatch, then combine.
  // The intranode calls above are refused there, and these in an intranode backend.
  virtual bool internode() const { return false; }
  virtual int nodes() const { return 1; }
  virtual runtime::HTInternodeRoute route(const runtime::TensorRef& topk_idx, const runtime::HTInternodeTables& t,
                                          const runtime::HTConfig& config, int64_t expert_alignment, void* stream);
  virtual void internode_dispatch(const runtime::HTInternodeRoute& r, const runtime::HTInternodeTables& t,
                                  const runtime::TensorRef& x, const runtime::TensorRef& x_scales,
                                  const runtime::TensorRef& topk_weights, const runtime::HTConfig& config,
                                  int64_t expert_alignment, const HTOutputs& out, void* stream);
  virtual void internode_combine(const runtime::HTInternodeRoute& r, const runtime::HTInternodeTables& t,
                                 const runtime::TensorRef& x, const runtime::TensorRef& topk_weights,
                                 const runtime::HTConfig& config, const runtime::TensorRef& out,
                                 const runtime::TensorRef& out_weights, void* stream);
  // Throws the error an HT kernel reported, if any.
  virtual void check_async() = 0;
  // Waits for this rank's work on the device (before the barrier that precedes freeing).
  virtual void synchronize() = 0;
  virtual void destroy() = 0;
};

// Collective over `boot`: every rank allocates its HT buffer (spec.ht_bytes) on `device` and
// opens every peer's by CUDA IPC (a rank that cannot tells the others, who fail naming it; a peer
// out of reach of direct stores is Unsupported naming it). Without CUDA: Unsupported.
std::unique_ptr<HTBackend> make_ht_backend(const GroupSpec& spec, int device, transport::Bootstrap& boot);
// Collective over `boot`, ranks on several nodes of `ranks_per_node`: the rail exchange over the
// proxy (ANYEP_HT_NET_PATH) and every node's intranode buffer (spec.ht_bytes each).
std::unique_ptr<HTBackend> make_ht_internode_backend(const GroupSpec& spec, int ranks_per_node, int device,
                                                     transport::Bootstrap& boot);

}  // namespace anyep::capi
