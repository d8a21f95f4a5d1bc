// anyep/src/kernels/ll/combine.cu — the low-latency combine kernel for the fast dispatch layout
// (ll/layout.h), and the launcher; the code is in ll/combine_impl.cuh.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ll/combine_impl.cuh"

namespace anyep::ll {

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream) {
  if (a.c.g.compact) return launch_combine_compact(a, stream);
  return timeline::launch_timed("combine", a, stream, [stream](const CombineArgs& t) {
    combine_kernel<false><<<t.c.num_blocks, kBlockThreads, 0, stream>>>(t);
    return cudaGetLastError();
  });
}

cudaError_t preload_combine() { return load_functions(combine_kernel<false>); }

}  // namespace anyep::ll
