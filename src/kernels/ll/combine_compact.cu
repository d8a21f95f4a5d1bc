// anyep/src/kernels/ll/combine_compact.cu — the low-latency combine kernel for the compact dispatch
// layout (ll/layout.h; rows for a rank behind the proxy are staged where their route entries say).
// Its own translation unit: see ll/combine_impl.cuh.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ll/combine_impl.cuh"

namespace anyep::ll {

cudaError_t launch_combine_compact(const CombineArgs& a, cudaStream_t stream) {
  return timeline::launch_timed("combine", a, stream, [stream](const CombineArgs& t) {
    combine_kernel<true><<<t.c.num_blocks, kBlockThreads, 0, stream>>>(t);
    return cudaGetLastError();
  });
}

cudaError_t preload_combine_compact() { return load_functions(combine_kernel<true>); }

}  // namespace anyep::ll
