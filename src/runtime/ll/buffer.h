// anyep/src/runtime/ll/buffer.h — the low-latency buffer: owns the symmetric LL buffer, the CUDA
// IPC peer table, the scratch counters and the host-mapped error record; validates shapes and
// launches the LL kernels. No torch. Callers with tensors go through runtime/ll/api.h, which checks
// a call's arguments and fills the kernel arguments from this buffer.
//
// Life cycle: construct (allocates, zeroes) -> local_info() on every rank -> allgather (caller's
// bootstrap) -> connect(all infos) -> dispatch/combine ... -> destroy() (or destructor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/gpu_runtime.h"
#include "kernels/ll/kernels.h"
#include "runtime/common/ipc_peers.h"
#include "runtime/common/proxy_link.h"
#include "runtime/common/region.h"
#include "runtime/ll/validate.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::runtime {

struct LLShape {
  int64_t max_tokens = 0;   // T: num_max_dispatch_tokens_per_rank
  int64_t hidden = 0;       // H
  int64_t num_experts = 0;  // E
};

class LowLatencyBuffer {
 public:
  // Allocates `num_bytes` of device memory on `device` (-1: the current device), zeroed, for rank
  // `rank` of `num_ranks`. Every later call selects that device itself, so callers whose CUDA
  // runtime state differs (e.g. torch's current device) cannot send work to the wrong GPU.
  // `path` (LLPath name; "" reads ANYEP_LL_PATH) says how peers are reached; a proxy path whose
  // transport cannot register GPU memory gets the buffer in pinned host memory mapped into the GPU.
  // `enable_shrink` (DeepEP's elastic mode) allocates the rank mask (below).
  // Throws InvalidArgument / CudaError naming what failed.
  LowLatencyBuffer(int rank, int num_ranks, int64_t num_bytes, int device = -1, const std::string& path = "",
                   bool enable_shrink = false);
  ~LowLatencyBuffer();
  LowLatencyBuffer(const LowLatencyBuffer&) = delete;
  LowLatencyBuffer& operator=(const LowLatencyBuffer&) = delete;

  // Bytes an LL buffer needs for a shape (both halves, signals, both directions).
  static int64_t size_hint(int64_t max_tokens, int64_t hidden, int64_t num_ranks, int64_t num_experts);

  // This rank's connection record (rank, host, device PCI id, IPC handle), to allgather.
  std::vector<uint8_t> local_info() const;
  // Opens every peer's buffer through CUDA IPC when it lives on this host and its GPU is reachable
  // (same device, or peer access over NVLink/PCIe), unless the path sends every peer through the
  // proxy; the other peers go through the proxy, which is built here, collectively over `boot`,
  // when any rank needs it (every rank must pass a bootstrap then; null: direct peers only).
  void connect(const std::vector<std::vector<uint8_t>>& infos, transport::Bootstrap* boot = nullptr);
  bool connected() const { return connected_; }
  // True if rank r is reached by direct stores.
  bool peer_direct(int r) const { return r >= 0 && r < peers_.size() && peers_[r] != nullptr; }
  LLPath path() const { return path_; }
  bool host_staged() const { return static_cast<bool>(staged_); }
  // "direct (CUDA IPC) to ranks 0,1; proxy (cuda-ipc/cuda-ipc, 4 threads, 16 rings) to ranks 2,3".
  std::string describe_paths() const;

  // Checks the shape against the buffer and the limits; throws InvalidArgument naming the problem.
  ll::Layout layout_for(const LLShape& s) const;
  // What the call checks (runtime/ll/validate.h) need to know of this buffer.
  LLBufferInfo info() const { return {num_ranks_, device_, num_bytes_, shrink(), compact_}; }
  // ANYEP_LL_CHECK_INPUTS (default off), read at construction: check topk_idx values on the host
  // before a call (a copy and a stream sync; the kernels refuse bad values either way).
  bool check_inputs() const { return check_inputs_; }

  // Rank mask (shrink mode only; callers check with runtime/ll/validate.h first): a device int32
  // per rank, zeroed at construction, 1 = masked. Dispatch and combine skip masked ranks, and a
  // peer that times out in a wait is masked instead of failing the call. Stream-ordered on
  // `stream` (no host sync, capturable); clean() leaves the mask as it is.
  bool shrink() const { return static_cast<bool>(mask_); }
  void set_mask(int rank, bool masked, cudaStream_t stream);
  // Copies the mask into `dst`, a device int32 array of num_ranks() entries on this buffer's device.
  void copy_mask(int32_t* dst, cudaStream_t stream) const;
  void clear_mask(cudaStream_t stream);

  // Fills the shared part of the kernel arguments for the next dispatch/combine (toggles the
  // buffer half) after checking for an earlier asynchronous error. The shape and counts are
  // checked here (runtime/ll/validate.h), for callers that launch the kernels themselves.
  ll::Common next_dispatch_common(const LLShape& s, int num_tokens, int num_topk);
  ll::Common next_combine_common(const LLShape& s, int num_tokens, int num_topk);
  // The same for a call the contract already checked (runtime/ll/api.h): its plan's layout and
  // counts are taken as they are.
  ll::Common next_dispatch_common(const LLDispatchPlan& p);
  ll::Common next_combine_common(const LLCombinePlan& p);

  // Launch the given phases (kPhaseSend, kPhaseRecv or both) on `stream`. No sync, no allocation.
  void launch(ll::DispatchArgs a, int phases, cudaStream_t stream) const;
  void launch(ll::CombineArgs a, int phases, cudaStream_t stream) const;

  // Zero the signals and counters of both halves (after a timeout, or a shape change), on the
  // current device synchronously. The caller makes sure no peer still writes into this buffer
  // (a barrier over all ranks before and after: clean_elastic, or the caller's own).
  void clean();
  // Shrink mode: barrier, clean(), barrier, where the barrier (a kernel over the LL paths,
  // ll/barrier.cu) skips masked ranks and masks a rank that does not arrive within
  // ANYEP_TIMEOUT_S, so a dead rank cannot hang it. Every live rank must call it. Throws
  // InvalidArgument without shrink mode, TimeoutError if the barrier itself could not run.
  void clean_elastic();
  // Throws TimeoutError (or InvalidArgument for misuse detected on the device) if a kernel
  // reported an error; clears nothing (the buffer must be cleaned or rebuilt).
  void check_error() const;
  void destroy();

  int rank() const { return rank_; }
  int num_ranks() const { return num_ranks_; }
  int64_t num_bytes() const { return num_bytes_; }
  int device() const { return device_; }
  uint8_t* local_ptr() const { return local_; }

 private:
  ll::Common common_for(const ll::Layout& g, int64_t num_tokens, int64_t num_topk, int buf);
  ll::Common common_base() const;  // the shape-free part (paths, workspace, error record, mask)
  void run_barrier(const char* when);
  void connect_proxy(transport::Bootstrap& boot);
  int rank_, num_ranks_, device_ = 0, num_blocks_ = 0;
  int64_t num_bytes_;
  LLPath path_ = LLPath::kAuto;
  // The LL buffer: device memory, or (host-staged) pinned host memory mapped into the GPU; local_
  // is its GPU address either way.
  DeviceRegion buffer_;
  MappedHostRegion staged_;
  uint8_t* local_ = nullptr;
  DeviceRegion ws_;       // scratch counters (int32)
  MappedHostRegion err_;  // ll::ErrorRecord
  // Shrink mode: device int32 [R + 2]: the mask, then the constants 0 and 1 that set_mask copies
  // from (a device-to-device copy: stream-ordered, no kernel, no pageable host memory). Else empty.
  DeviceRegion mask_;
  IpcPeers peers_;  // after the regions: destroyed (its mappings closed) before they are freed
  std::vector<std::unique_ptr<transport::Transport>> endpoints_;  // made early to learn gpu_memory
  std::unique_ptr<ProxyLink> proxy_;  // last: its threads stop before any memory they use goes
  bool all_direct_ = false;           // every peer is reached by direct stores (Common::all_direct)
  int unreachable_ = -1;              // after connect: a rank with no path at all (no direct path, no proxy), or -1
  uint64_t timeout_ns_ = 0;
  int dispatch_half_ = 0, combine_half_ = 0;
  bool connected_ = false;
  bool destroyed_ = false;
  bool check_inputs_ = false;
  bool compact_ = false;  // compact dispatch layout (ANYEP_LL_LAYOUT), fixed for the buffer's life
};

}  // namespace anyep::runtime
