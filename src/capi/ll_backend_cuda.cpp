// The C API's LL backend over the CUDA runtime (runtime/ll/api.h): the same calls the Python
// extension makes, with the C caller's descriptors and stream.
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "capi/collective.h"
#include "capi/cuda_backend.h"
#include "capi/device_guard.h"
#include "capi/ll_backend.h"
#include "common/cuda_check.h"
#include "common/error.h"
#include "runtime/ll/api.h"
#include "runtime/ll/buffer.h"

namespace anyep::capi {
namespace {

using runtime::LowLatencyBuffer;

class CudaLL final : public CudaBackend<LLBackend, LowLatencyBuffer> {
 public:
  CudaLL(const GroupSpec& spec, int device, transport::Bootstrap& boot) : CudaBackend(device) {
    const std::vector<std::vector<uint8_t>> infos = build_and_exchange(boot, "LL buffer", [&] {
      DeviceGuard guard(device);
      buf_ = std::make_unique<LowLatencyBuffer>(spec.rank, spec.num_ranks, spec.ll_bytes, device, spec.ll_path);
      return buf_->local_info();
    });
    DeviceGuard guard(device);
    buf_->connect(infos, &boot);
  }
  runtime::LLBufferInfo info() const override { return buf_->info(); }

  RecvPhase dispatch(const runtime::LLDispatchIn& in, const runtime::LLDispatchOut& out, bool send_only,
                     void* stream) override {
    DeviceGuard guard(device_);
    const runtime::LLCall call = runtime::dispatch(*buf_, in, out, send_only ? ll::kPhaseSend : ll::kPhaseBoth,
                                                   static_cast<cudaStream_t>(stream));
    return send_only ? recv_phase(call) : RecvPhase();
  }
  RecvPhase combine(const runtime::LLCombineIn& in, const runtime::TensorRef& out, bool send_only,
                    void* stream) override {
    DeviceGuard guard(device_);
    const runtime::LLCall call = runtime::combine(*buf_, in, out, send_only ? ll::kPhaseSend : ll::kPhaseBoth,
                                                  static_cast<cudaStream_t>(stream));
    return send_only ? recv_phase(call) : RecvPhase();
  }

 private:
  RecvPhase recv_phase(const runtime::LLCall& call) const {
    const int device = device_;
    return [call, device](void* stream) {
      DeviceGuard guard(device);
      call.launch(ll::kPhaseRecv, static_cast<cudaStream_t>(stream));
    };
  }
};

}  // namespace

std::unique_ptr<LLBackend> make_ll_backend(const GroupSpec& spec, int device, transport::Bootstrap& boot) {
  return std::make_unique<CudaLL>(spec, device, boot);
}

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    if (why) *why = std::string("no GPU: cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "no GPU: cudaGetDeviceCount found no CUDA device";
  return n;
}

int resolve_device(int requested) {
  if (requested >= 0) return requested;
  int d = 0;
  cuda_check(cudaGetDevice(&d), "anyep", "cudaGetDevice");
  return d;
}

void* device_alloc(size_t bytes, int device) {
  DeviceGuard guard(device);
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, bytes), "anyep", "cudaMalloc of handle memory");
  return p;
}

void device_free(void* p, int device) {
  if (!p) return;
  DeviceGuard guard(device);
  cudaFree(p);
}

}  // namespace anyep::capi
