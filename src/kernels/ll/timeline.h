// anyep/src/kernels/ll/timeline.h — a per-block timeline of the LL kernels, for profiling builds
// only (cmake -DANYEP_LL_TIMELINE=ON; docs/ll.md, "Timeline of a call").
//
// The kernels stamp the global timer at named points of each phase (the latest stamp per block
// and point wins); the launcher waits for each call, reads the stamps, and at process exit prints,
// per kernel and phase set, the median over calls of the earliest, median and latest block at each
// point, relative to the earliest block's start. Kernel-duration figures alone could not say
// which phase holds a call up; this can. Off (the default), every mark compiles to nothing and the
// launchers launch as before; on, every call synchronizes, so use it with one process and for
// timelines only, never for the timings themselves.
#pragma once

#include <cstdint>

#include "common/gpu_runtime.h"
#include "common/portability.h"

#ifndef ANYEP_LL_TIMELINE
#define ANYEP_LL_TIMELINE 0
#endif

namespace anyep::ll::timeline {

inline constexpr int kMarks = 8;  // stamps per block

// Dispatch points (block = the block's latest thread to reach it).
enum DispatchMark : int {
  kDispatchStart = 0,    // the block's first instruction (thread 0)
  kDispatchSlots = 1,    // send: the block's last token has its slots and headers
  kDispatchTokens = 2,   // send: the block's tokens are stored and counted
  kDispatchCounts = 3,   // send: its count warps have seen their experts complete and signalled
  kDispatchWait = 4,     // receive: its teams' counts arrived (the wait's end)
  kDispatchReserve = 5,  // receive: its teams' rows reserved (round 0 loaded)
  kDispatchEnd = 6,      // the block's last warp is done
};
// Combine points.
enum CombineMark : int {
  kCombineStart = 0,   // the block's first instruction (thread 0)
  kCombineScan = 1,    // send: the pair rows are scanned (balanced) / first expert begun (per expert)
  kCombineCopy = 2,    // send: the block's rows are stored
  kCombineFlags = 3,   // send: its flags are stored (or pushed)
  kCombineWait = 4,    // receive: the flags of the block's last token arrived
  kCombineReduce = 5,  // receive: the block's tokens are reduced
  kCombineEnd = 6,     // the block's last warp is done
};

#if ANYEP_LL_TIMELINE && (defined(__CUDACC__) || defined(__HIPCC__))
// Stamp point m for this block (the latest caller wins). Callers pick the threads: one per block,
// team or warp.
__device__ __forceinline__ void mark(unsigned long long* stamps, int m) {
  if (stamps != nullptr) atomicMax(stamps + blockIdx.x * kMarks + m, static_cast<unsigned long long>(port::now_ns()));
}
// The same, from lane 0 of each warp that reaches it.
__device__ __forceinline__ void mark_warp(unsigned long long* stamps, int m) {
  if (threadIdx.x % port::kWarpSize == 0) mark(stamps, m);
}
#elif defined(__CUDACC__) || defined(__HIPCC__)
__device__ __forceinline__ void mark(unsigned long long*, int) {}
__device__ __forceinline__ void mark_warp(unsigned long long*, int) {}
#endif

#if ANYEP_HAVE_GPU_RUNTIME
#if ANYEP_LL_TIMELINE
// The stamp buffer for the next launch, zeroed on `stream`; null while the stream is being
// captured into a graph (a capture cannot synchronize).
unsigned long long* begin(cudaStream_t stream);
// After the launch: wait for it, read the stamps of `blocks` blocks and add them to the record of
// `kernel` with `phases` (printed at exit).
void end(const char* kernel, int phases, int blocks, cudaStream_t stream);
#endif

// Launch through `launch(args)`, stamped in a profiling build; otherwise just the launch.
template <class Args, class Launch>
cudaError_t launch_timed(const char* kernel, const Args& a, cudaStream_t stream, Launch launch) {
#if ANYEP_LL_TIMELINE
  Args t = a;
  t.c.timeline = begin(stream);
  const cudaError_t e = launch(t);
  if (e == cudaSuccess && t.c.timeline != nullptr) end(kernel, a.c.phases, a.c.num_blocks, stream);
  return e;
#else
  (void)kernel;
  (void)stream;
  return launch(a);
#endif
}
#endif

}  // namespace anyep::ll::timeline
