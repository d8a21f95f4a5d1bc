// anyep/src/kernels/ll/dispatch_recv.cu — the receive-only dispatch kernel, launched for the
// staged hook (phases == kPhaseRecv); the code is in ll/dispatch_recv.cuh.
// It has a unit of its own so that it can carry the fused kernel's name, dispatch_kernel<compact>
// in an unnamed namespace: profilers, and DeepEP's harness (one kineto row per kernel name, its
// events split by launch order into send and receive), see one dispatch kernel launched for each
// phase, as DeepEP's is.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ll/dispatch_recv.cuh"

namespace anyep::ll {
namespace {

template <bool kCompact, bool kHostMem>
__global__ void __launch_bounds__(kRecvOnlyThreads, 1) dispatch_kernel(const ANYEP_GRID_CONSTANT DispatchArgs a) {
  if (threadIdx.x == 0) timeline::mark(a.c.timeline, timeline::kDispatchStart);
  recv_phase<kCompact, kRecvOnlyTeams, kHostMem>(a);
  timeline::mark_warp(a.c.timeline, timeline::kDispatchEnd);
}

}  // namespace

cudaError_t launch_dispatch_recv(const DispatchArgs& a, cudaStream_t stream) {
  return launch_dispatch_instance(a, [&](auto compact, auto host_mem) {
    dispatch_kernel<decltype(compact)::value, decltype(host_mem)::value>
        <<<a.c.num_blocks, kRecvOnlyThreads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t preload_dispatch_recv() {
  return load_functions(dispatch_kernel<true, false>, dispatch_kernel<true, true>, dispatch_kernel<false, false>,
                        dispatch_kernel<false, true>);
}

}  // namespace anyep::ll
