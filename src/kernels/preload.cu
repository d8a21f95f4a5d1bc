// anyep/src/kernels/preload.cu — every kernel file's preload, once per device (preload.h).
#include "kernels/preload.h"

#include <mutex>
#include <set>

#include "kernels/ht/kernels.h"
#include "kernels/ll/kernels.h"

namespace anyep {

cudaError_t preload_kernels() {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  static std::mutex mu;
  static std::set<int> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded.count(device)) return cudaSuccess;
  for (auto preload : {ll::preload_dispatch, ll::preload_dispatch_recv, ll::preload_combine,
                       ll::preload_combine_compact, ll::preload_barrier, ht::preload_layout, ht::preload_notify,
                       ht::preload_dispatch, ht::preload_combine, ht::preload_net, ht::preload_internode})
    if (const cudaError_t e = preload(); e != cudaSuccess) return e;
  loaded.insert(device);
  return cudaSuccess;
}

}  // namespace anyep
