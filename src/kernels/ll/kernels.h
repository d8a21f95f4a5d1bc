// anyep/src/kernels/ll/kernels.h — low-latency dispatch/combine entry points.
// Raw pointers and a stream only (no torch); the runtime (src/runtime/ll/buffer.h) fills the
// argument structs. Buffer layout: ll/layout.h.
#pragma once

#include <cstdint>

#include "channel/ring.h"
#include "common/gpu_runtime.h"
#include "kernels/common/error_record.h"
#include "kernels/common/fast_div.h"
#include "kernels/common/proxy_path.h"
#include "kernels/ll/layout.h"

namespace anyep::ll {

inline constexpr int kMaxBlocks = 1024;  // grid size limit (one block per SM); Workspace::combine_epoch

// Which half of a staged operation a launch runs (both = one fused launch).
enum Phase : int { kPhaseSend = 1, kPhaseRecv = 2, kPhaseBoth = 3 };

// Dispatch payload format.
enum class Format : int { kBF16 = 0, kFP8 = 1, kFP8UE8M0 = 2 };

// LL error codes, in the shared ErrorRecord (kernels/common/error_record.h; kErrNone and
// kErrRingTimeout are common to both modes).
enum ErrorCode : uint32_t {
  kErrDispatchRecvTimeout = 1,  // count for (local expert, source rank) never arrived
  kErrCombineRecvTimeout = 2,   // combine flag for (expert, owner rank) never arrived
  kErrSendTimeout = 3,          // local blocks did not finish sending an expert's tokens
  kErrNoPeer = 4,               // peer has no direct stores and this buffer has no proxy
  kErrSlotOverflow = 5,         // more messages for one (expert, source) than tokens per rank
  kErrBadExpert = 6,            // topk_idx entry outside [-1, E) (host checks are off)
  kErrBarrierTimeout = 8,       // clean's barrier: a peer did not arrive (without shrink mode)
};
using anyep::ErrorRecord;
using anyep::kErrNone;
using anyep::kErrRingTimeout;

// Local (not shared) scratch counters, zeroed by clean. The kernels keep the counts of one call at
// zero between calls; the combine epochs and the barrier counts only grow.
struct Workspace {
  int32_t* send_slot;  // [E] next free slot per destination expert
  int32_t* send_done;  // [E] messages written per destination expert
  // [L] per local expert, this call: bits 0..31 rows received so far, bits 32..63 sources whose
  // count arrived. One 64-bit atomic add per (expert, source) gives the source its first row and
  // tells the last source that it is last (it publishes the count and resets the word), so the
  // receive needs no last-block pass. 8-byte aligned: it starts at int 2E of the workspace.
  unsigned long long* recv_arrivals;
  int32_t* blocks_done;  // [1] finished combine receive blocks (the last one resets the proxied flags)
  // [2 halves][2 phases (send, receive)][kMaxBlocks]: combine calls so far on a buffer half, one
  // copy per block (every block runs every call, so the copies agree and no block waits for
  // another to advance it). A combine flag stored directly carries its call's number instead of
  // being reset by a last-block pass: the receive waits until it has reached its own number
  // (dev::epoch_reached). Flags through the proxy add 1 and are reset by the last block: a proxy
  // counter only adds, and after a change of shape another rank may add to it.
  uint32_t* combine_epoch;
  int32_t* barrier_sent;  // [R] barrier arrivals sent to each rank
  int32_t* barrier_seen;  // [R] barrier arrivals of each rank consumed here
  static constexpr int64_t kEpochInts = 4 * static_cast<int64_t>(kMaxBlocks);
  static constexpr int64_t reset_ints(int64_t E) { return 4 * E + 8 + kEpochInts; }
  static constexpr int64_t ints(int64_t E) { return reset_ints(E) + 2 * E; }  // R <= E
};

using anyep::ProxyPath;  // kernels/common/proxy_path.h

struct Common {
  Layout g;
  FastDiv by_ranks;  // n / g.R without a division instruction (set with g.R by the runtime)
  int rank = 0;
  int num_topk = 0;
  int num_tokens = 0;  // this rank's tokens, <= g.T
  int buf = 0;         // buffer half, 0 or 1
  int phases = kPhaseBoth;
  int num_blocks = 0;               // grid size (all blocks must be co-resident), <= kMaxBlocks
  uint8_t* local = nullptr;         // this rank's LL buffer
  uint8_t* const* peers = nullptr;  // device array [R]: peer buffer via CUDA IPC, null if not NVLink
  bool all_direct = false;          // every entry of peers is set: waits skip the table (dev::direct_peer)
  bool host_mem = false;            // `local` is pinned host memory (host-staged proxy buffer)
  ProxyPath proxy{};
  Workspace ws{};
  ErrorRecord* err = nullptr;  // device view of the host-mapped record
  uint64_t timeout_ns = 0;
  // Shrink mode (Buffer(enable_shrink=True)): device int32 [R], non-zero = rank masked. Sends
  // skip a masked rank and waits do not wait for it; a peer wait that times out masks the peer
  // instead of reporting an error. Null otherwise: the kernels behave as without masking.
  int32_t* mask = nullptr;
  unsigned long long* timeline = nullptr;  // profiling builds (ll/timeline.h): [grid][timeline::kMarks] stamps
};

struct DispatchArgs {
  Common c;
  const void* x = nullptr;            // bf16 [N, H]
  const int64_t* topk_idx = nullptr;  // [N, K], -1 = none
  Format fmt = Format::kFP8;
  bool round_scale = false;
  void* recv_x = nullptr;                    // [L, R*T, H] bf16 or e4m3
  void* recv_scales = nullptr;               // fp32 [L, H/128, R*T] or int32 [L, H/512, R*T] (column-major views)
  int32_t* recv_count = nullptr;             // [L]
  int32_t* src_info = nullptr;               // [L, R*T] source token index
  int32_t* src_topk = nullptr;               // [L, R*T] top-k slot of that row (for combine)
  int64_t* layout_range = nullptr;           // [L, R] begin << 32 | count
  int32_t* cumulative_recv_stats = nullptr;  // [L] optional
  int64_t* wait_recv_cost_stats = nullptr;   // [R] optional (ns)
  int32_t* handle_half = nullptr;            // out: the buffer half this dispatch used (combine stages there)
};

struct CombineArgs {
  Common c;
  const void* x = nullptr;  // bf16 [L, R*T, H] expert outputs
  const int32_t* src_info = nullptr;
  const int32_t* src_topk = nullptr;
  const int64_t* layout_range = nullptr;
  const int32_t* handle_half = nullptr;     // dispatch half of the handle (written by its dispatch)
  const int64_t* topk_idx = nullptr;        // [N, K] home rank's routing
  const float* topk_weights = nullptr;      // [N, K]
  void* out = nullptr;                      // bf16 [N, H]
  int64_t* wait_recv_cost_stats = nullptr;  // [R] optional (ns)
  bool logfmt = false;                      // rows travel as LogFMT (logfmt.h); every rank must agree
};

#if ANYEP_HAVE_GPU_RUNTIME
// Launch; returns the launch error (no host sync, no allocation: capturable).
cudaError_t launch_dispatch(const DispatchArgs& a, cudaStream_t stream);
cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream);
// The elastic barrier of clean (ll/barrier.cu): arrive at every rank not masked, wait (bounded)
// for every rank not masked; a rank that does not arrive is masked (shrink mode) or reported.
// Reads c.rank, c.g.R, c.peers, c.proxy, c.ws (barrier counts), c.mask, c.err, c.timeout_ns, c.local.
cudaError_t launch_barrier(const Common& c, cudaStream_t stream);
// Each loads its file's kernels now (kernels/preload.h says why).
cudaError_t preload_dispatch();
cudaError_t preload_dispatch_recv();
cudaError_t preload_combine();
cudaError_t preload_combine_compact();
cudaError_t preload_barrier();
#endif

inline constexpr int kBlockThreads = 1024;

}  // namespace anyep::ll
