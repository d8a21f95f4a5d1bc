// anyep/src/kernels/preload.h — load every anyep kernel into the current device's context now,
// when a buffer is built, instead of at its first launch.
//
// Why: with CUDA's lazy loading (the default since 12.2) a kernel's first launch may load its
// module, and loading waits for the context's running kernels. An exchange kernel spinning for a
// peer's data then blocks the launch behind it, and with it every other CUDA call of the process,
// among them the copies the proxy makes for that very data on the cuda-ipc transport: both
// processes wait for each other until the kernel's timeout (seen on one H200, 2026-11-26;
// docs/transport.md, "CUDA calls in the proxy"). Loaded up front, no launch of anyep's needs
// that wait.
#pragma once

#include "common/gpu_runtime.h"

namespace anyep {

#if ANYEP_HAVE_GPU_RUNTIME
// Loads the LL and HT kernels on the current device (once per device and process; later calls
// return at once). Returns the first error.
cudaError_t preload_kernels();
#endif

}  // namespace anyep
