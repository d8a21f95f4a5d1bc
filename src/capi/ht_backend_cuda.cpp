// The C API's HT backend over the CUDA runtime (runtime/ht/buffer.h): the calls the Python
// extension (python/csrc/ht_ext.cpp) makes, with the C caller's descriptors and stream.
#include <cuda_runtime_api.h>

#include "capi/collective.h"
#include "capi/cuda_backend.h"
#include "capi/device_guard.h"
#include "capi/ht_backend.h"
#include "runtime/ht/buffer.h"
#include "runtime/ht/internode.h"

namespace anyep::capi {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

runtime::HTDispatchOut dispatch_out(const HTOutputs& o) {
  runtime::HTDispatchOut out;
  out.recv_x = o.recv_x;
  out.recv_x_scales = o.recv_x_scales;
  out.recv_topk_idx = o.recv_topk_idx;
  out.recv_topk_weights = o.recv_topk_weights;
  out.recv_channel_prefix_matrix = o.recv_channel_prefix_matrix;
  out.recv_src_idx = o.recv_src_idx;
  out.send_head = o.send_head;
  return out;
}

class CudaHT final : public CudaBackend<HTBackend, runtime::HTBuffer> {
 public:
  CudaHT(const GroupSpec& spec, int device, transport::Bootstrap& boot) : CudaBackend(device) {
    const std::vector<std::vector<uint8_t>> infos = build_and_exchange(boot, "HT buffer", [&] {
      DeviceGuard guard(device);
      buf_ = std::make_unique<runtime::HTBuffer>(spec.rank, spec.num_ranks, spec.ht_bytes, device);
      return buf_->local_info();
    });
    DeviceGuard guard(device);
    buf_->connect(infos);
  }

  runtime::HTBufferInfo info() const override { return buf_->info(); }

  void layout(const runtime::HTLayoutIn& in, const runtime::HTLayoutPlan& p, const runtime::TensorRef& ntpr,
              const runtime::TensorRef& ntpe, const runtime::TensorRef& itir, void* stream) override {
    DeviceGuard guard(device_);
    buf_->get_dispatch_layout(in, p, ntpr, ntpe, itir, as_stream(stream));
  }
  HTCounts notify(const runtime::HTDispatchIn& in, const runtime::HTDispatchPlan& p, const runtime::TensorRef& rpm,
                  const runtime::TensorRef& cpm, void* stream) override {
    DeviceGuard guard(device_);
    runtime::HTBuffer::Counts c = buf_->notify(in, p, rpm, cpm, as_stream(stream));
    HTCounts out;
    out.num_recv = c.num_recv;
    out.per_expert = std::move(c.per_expert);
    return out;
  }
  void dispatch(const runtime::HTDispatchIn& in, const runtime::HTDispatchPlan& p, int64_t num_recv,
                const runtime::TensorRef& rpm, const runtime::TensorRef& cpm, const HTOutputs& o,
                void* stream) override {
    DeviceGuard guard(device_);
    buf_->dispatch(in, p, num_recv, rpm, cpm, dispatch_out(o), as_stream(stream));
  }
  void combine(const runtime::HTCombineIn& in, const runtime::HTCombinePlan& p, const runtime::TensorRef& out,
               const runtime::TensorRef& out_weights, void* stream) override {
    DeviceGuard guard(device_);
    buf_->combine(in, p, out, out_weights, as_stream(stream));
  }
};

[[noreturn]] void intranode_call(const char* call) {
  throw InternalError(std::string("capi: ") + call + " on an internode HT backend (use route)");
}

// Ranks on several nodes: runtime::HTInternode (the rail exchange and the node's buffer).
class CudaHTInternode final : public CudaBackend<HTBackend, runtime::HTInternode> {
 public:
  CudaHTInternode(const GroupSpec& spec, int ranks_per_node, int device, transport::Bootstrap& boot)
      : CudaBackend(device), num_experts_(spec.num_experts) {
    rows_.hidden = spec.hidden;
    rows_.x_dtype = spec.dispatch_dtype;
    if (spec.fp8()) {
      rows_.scale_dtype = spec.ue8m0 ? runtime::DType::kInt32 : runtime::DType::kFloat32;
      rows_.scale_cols = spec.ue8m0 ? spec.hidden / 512 : spec.hidden / 128;
    }
    const int nodes = spec.num_ranks / ranks_per_node;
    const std::vector<std::vector<uint8_t>> infos = build_and_exchange(boot, "HT buffers", [&] {
      DeviceGuard guard(device);
      // The exchange region and the scratch rows for the worst case: every token to every node.
      buf_ = std::make_unique<runtime::HTInternode>(spec.rank, spec.num_ranks, ranks_per_node, spec.ht_bytes,
                                                    runtime::ht_internode_region_bytes(rows_, spec.max_tokens, nodes),
                                                    device);
      buf_->reserve(int64_t(nodes) * spec.max_tokens, rows_);
      return buf_->local_info();
    });
    DeviceGuard guard(device);
    buf_->connect(infos, boot);
  }

  runtime::HTBufferInfo info() const override { return buf_->node_info(); }
  bool internode() const override { return true; }
  int nodes() const override { return buf_->nodes(); }

  void layout(const runtime::HTLayoutIn&, const runtime::HTLayoutPlan&, const runtime::TensorRef&,
              const runtime::TensorRef&, const runtime::TensorRef&, void*) override {
    intranode_call("layout");
  }
  HTCounts notify(const runtime::HTDispatchIn&, const runtime::HTDispatchPlan&, const runtime::TensorRef&,
                  const runtime::TensorRef&, void*) override {
    intranode_call("notify");
  }
  void dispatch(const runtime::HTDispatchIn&, const runtime::HTDispatchPlan&, int64_t, const runtime::TensorRef&,
                const runtime::TensorRef&, const HTOutputs&, void*) override {
    intranode_call("dispatch");
  }
  void combine(const runtime::HTCombineIn&, const runtime::HTCombinePlan&, const runtime::TensorRef&,
               const runtime::TensorRef&, void*) override {
    intranode_call("combine");
  }

  runtime::HTInternodeRoute route(const runtime::TensorRef& topk_idx, const runtime::HTInternodeTables& t,
                                  const runtime::HTConfig& c, int64_t alignment, void* stream) override {
    DeviceGuard guard(device_);
    const runtime::HTInternodeCounts counts = buf_->route_send(topk_idx, num_experts_, rows_, t, as_stream(stream));
    return buf_->route_finish(counts, t, c, alignment, 0, as_stream(stream));
  }
  void internode_dispatch(const runtime::HTInternodeRoute& r, const runtime::HTInternodeTables& t,
                          const runtime::TensorRef& x, const runtime::TensorRef& scales,
                          const runtime::TensorRef& weights, const runtime::HTConfig& c, int64_t alignment,
                          const HTOutputs& o, void* stream) override {
    DeviceGuard guard(device_);
    buf_->dispatch(r, t, x, scales, weights, dispatch_out(o), as_stream(stream));
  }
  void internode_combine(const runtime::HTInternodeRoute& r, const runtime::HTInternodeTables& t,
                         const runtime::TensorRef& x, const runtime::TensorRef& weights, const runtime::HTConfig& c,
                         const runtime::TensorRef& out, const runtime::TensorRef& out_weights, void* stream) override {
    DeviceGuard guard(device_);
    buf_->combine(r, t, x, weights, runtime::TensorRef(), runtime::TensorRef(), c, out, out_weights, as_stream(stream));
  }

 private:
  runtime::HTInternodeRows rows_;
  int64_t num_experts_;
};

}  // namespace

std::unique_ptr<HTBackend> make_ht_internode_backend(const GroupSpec& spec, int ranks_per_node, int device,
                                                     transport::Bootstrap& boot) {
  return std::make_unique<CudaHTInternode>(spec, ranks_per_node, device, boot);
}

std::unique_ptr<HTBackend> make_ht_backend(const GroupSpec& spec, int device, transport::Bootstrap& boot) {
  return std::make_unique<CudaHT>(spec, device, boot);
}

}  // namespace anyep::capi
