// anyep/src/runtime/ht/buffer.h — the high-throughput (normal mode) intranode buffer: owns the
// symmetric HT region (device memory, shared through CUDA IPC), the peer table, the host-mapped
// receive counters and error record, and runs the HT calls over tensor descriptors. No torch:
// the Python extension (python/csrc/ht_ext.cpp) converts tensors and allocates outputs.
//
// Life cycle: construct -> local_info() on every rank -> allgather -> connect(all infos) -> calls
// -> destroy(). A call: validate_ht_* (ht/validate.h) -> the caller allocates -> the call here.
// Dispatch is two steps because its output size is only known after the notify pass:
// notify() (counts exchanged; waits for them on the host unless num_worst_tokens) -> allocate ->
// dispatch(). Every call starts with a barrier over the ranks, on the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gpu_runtime.h"
#include "kernels/ht/kernels.h"
#include "runtime/common/ipc_peers.h"
#include "runtime/common/region.h"
#include "runtime/ht/validate.h"

namespace anyep::runtime {

struct HTDispatchOut {
  TensorRef recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, recv_channel_prefix_matrix, recv_src_idx,
      send_head;
};

class HTBuffer {
 public:
  // Allocates `num_bytes` (num_nvl_bytes) of device memory on `device` (-1: current), zeroed.
  HTBuffer(int rank, int num_ranks, int64_t num_bytes, int device = -1);
  ~HTBuffer();
  HTBuffer(const HTBuffer&) = delete;
  HTBuffer& operator=(const HTBuffer&) = delete;

  std::vector<uint8_t> local_info() const;
  // Opens every peer's region through CUDA IPC; throws Unsupported naming a rank that cannot be
  // reached by direct stores (internode HT over the proxy is not built yet).
  void connect(const std::vector<std::vector<uint8_t>>& infos);
  std::string describe_paths() const;
  HTBufferInfo info() const { return {rank_, num_ranks_, device_, num_bytes_, device_sms_}; }

  void get_dispatch_layout(const HTLayoutIn& in, const HTLayoutPlan& p, const TensorRef& num_tokens_per_rank,
                           const TensorRef& num_tokens_per_expert, const TensorRef& is_token_in_rank,
                           cudaStream_t stream);

  struct Counts {
    int64_t num_recv = 0;         // rows the outputs need
    std::vector<int> per_expert;  // aligned counts (empty with num_worst_tokens or a cached call)
  };
  // Non-cached: launches the notify pass writing rank/channel prefix matrices into `rpm`/`cpm`,
  // then (unless num_worst_tokens) waits on the host for the counts. Cached: launches the barrier.
  Counts notify(const HTDispatchIn& in, const HTDispatchPlan& p, const TensorRef& rpm, const TensorRef& cpm,
                cudaStream_t stream);
  void dispatch(const HTDispatchIn& in, const HTDispatchPlan& p, int64_t num_recv, const TensorRef& rpm,
                const TensorRef& cpm, const HTDispatchOut& out, cudaStream_t stream);
  void combine(const HTCombineIn& in, const HTCombinePlan& p, const TensorRef& out, const TensorRef& out_weights,
               cudaStream_t stream);

  // Throws the error a previous HT kernel reported (TimeoutError, or InvalidArgument for a bad
  // input found on the device). The buffer must be rebuilt after a timeout.
  void check_error() const;
  void destroy();
  int rank() const { return rank_; }
  int num_ranks() const { return num_ranks_; }
  int64_t num_bytes() const { return num_bytes_; }
  int device() const { return device_; }

 private:
  ht::Ctx ctx() const;
  void ready() const;  // connected, not destroyed, no pending error; selects the device
  int rank_, num_ranks_, device_ = 0, device_sms_ = 0;
  int64_t num_bytes_;
  DeviceRegion region_;        // the symmetric HT region
  MappedHostRegion err_;       // ErrorRecord
  MappedHostRegion counters_;  // int32 [1 + kMaxLocalExperts]: the receive counts notify publishes
  IpcPeers peers_;             // after the regions: destroyed (its mappings closed) before they are freed
  uint64_t timeout_ns_ = 0;
  bool connected_ = false, destroyed_ = false;
};

}  // namespace anyep::runtime
