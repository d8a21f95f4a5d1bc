// emunic/gpu/gpu_mover_kernel.h — the launch entry points of the mover kernel (gpu_mover_kernel.cu).
#pragma once

#include <cstddef>

#include "common/gpu_runtime.h"
#include "gpu_mover_layout.h"

namespace anyep_emunic::gpu {

// 512 leaves the kernel 128 registers a thread (1024 would cap it at 64 and spill the copy loop).
inline constexpr int kMoverMaxThreads = 512;

// Launches the mover with `blocks` x `threads` and `smem` bytes of (unused) dynamic shared memory
// on `stream`; `fence` false selects the test-only variant without the completion fence.
cudaError_t launch_mover(const MoverParams& p, bool fence, int blocks, int threads, size_t smem, cudaStream_t stream);

// Allows `smem` bytes of dynamic shared memory for both variants (over 48 KiB needs this).
cudaError_t allow_mover_smem(size_t smem);

}  // namespace anyep_emunic::gpu
