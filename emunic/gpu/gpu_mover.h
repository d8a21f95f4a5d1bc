// emunic/gpu/gpu_mover.h — a data mover that runs on the GPU: host threads post 32-byte move
// descriptors (GPU source, GPU destination, size, completion word) into a ring in pinned mapped host
// memory; warps of a kernel on this GPU copy the data with 16-byte accesses, fence at system scope
// and then write the completion word. Posting is a slot store and a doorbell (a store to a mapped
// word), no runtime call; the kernel leaves after an idle window without posted work, and the next
// post launches it again (one launch per burst), so cudaDeviceSynchronize, cudaFree and graph
// capture of other work are not held by an endless kernel. Design and figures: README.md here.
//
// Threads: post/post_batch/post_wait/quiesce are called by one thread at a time (the caller
// serializes, e.g. under its endpoint lock); the getters may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/gpu_runtime.h"
#include "gpu_mover_layout.h"

namespace anyep_emunic::gpu {

struct GpuMoverConfig {
  int device = 0;
  int sms = 16;                        // blocks of the engine, one per SM with exclusive_sms: the SMs it may take
  int threads = 512;                   // per block: a multiple of the warp size, 64..512
  uint32_t ring_slots = 1u << 16;      // descriptors in flight at most (a power of two, 64..2^24)
  uint32_t idle_us = 30;               // the kernel leaves after this long without posted work
  uint32_t split_bytes = 64u * 1024u;  // larger descriptors are shared by many warps ...
  uint32_t chunk_bytes = 16u * 1024u;  // ... in chunks of this size (>= 4096, a multiple of 16)
  bool exclusive_sms = true;           // reserve over half of an SM's shared memory per block: one block per SM
  bool fence = true;                   // false only to test the tests: drops the fence before completion stores
  bool preload = true;                 // load the kernel at creation (false only to show why it is needed)
};

enum class PostResult { kPosted, kRingFull };

class GpuMover {
 public:
  // Allocates the ring and state, creates the engine's non-blocking stream and (config.preload)
  // runs the kernel once so its module is loaded. Throws InvalidArgument naming a bad config field,
  // CudaError on a runtime failure.
  explicit GpuMover(const GpuMoverConfig& config);
  // Waits (bounded, 10 s) for posted work to finish and the kernel to leave, then frees everything.
  ~GpuMover();
  GpuMover(const GpuMover&) = delete;
  GpuMover& operator=(const GpuMover&) = delete;

  // A descriptor: `completion_word` gets `value` stored (kStore32) or added (kAdd32, kAdd64) once
  // the bytes are in place; nullptr with kNone for none. Throws InvalidArgument on a size over
  // kMaxMoveBytes, a null buffer with bytes > 0, or a completion word misaligned for its op.
  static MoveDescriptor describe(const void* src, void* dst, uint64_t bytes, void* completion_word = nullptr,
                                 CompletionOp op = CompletionOp::kNone, uint32_t value = 0);

  // Posts one descriptor (checked as describe() checks), or returns kRingFull when every slot is
  // still unread by the engine. Launches the kernel when it is not running.
  PostResult post(const MoveDescriptor& d);
  // Posts the first k of n descriptors that fit (k returned), with one doorbell.
  size_t post_batch(const MoveDescriptor* d, size_t n);
  // post(), retrying while the ring is full; TimeoutError after timeout_ns (with the ring's state).
  void post_wait(const MoveDescriptor& d, uint64_t timeout_ns);
  // Waits until every posted descriptor was taken by the engine and the kernel has left (its
  // stream is idle); TimeoutError after timeout_ns. Throws CudaError if the kernel failed.
  void quiesce(uint64_t timeout_ns);
  // Throws CudaError if the engine's stream recorded a failure (a bad address in a descriptor).
  void check() const;

  int sms() const { return config_.sms; }  // SMs the engine may take (the caller keeps the rest)
  int threads() const { return config_.threads; }
  int device() const { return config_.device; }
  const GpuMoverConfig& config() const { return config_; }
  uint64_t posted() const;         // descriptors posted so far
  uint64_t completed() const;      // descriptors completed, as last mirrored by the engine (may lag)
  uint64_t launches() const;       // kernel launches made for posts (the preload not counted)
  bool running() const;            // the latest launch has started and not yet finished
  std::string state_text() const;  // posted, read, launches, the engine's state word: for errors

 private:
  void setup(const cudaDeviceProp& prop);  // the constructor's allocations and preload
  void release();                          // frees what setup() made (also after a failed setup)
  void refresh_free();
  bool write_slot(const MoveDescriptor& d);
  void doorbell();
  void launch(bool preload);

  GpuMoverConfig config_;
  size_t smem_ = 0;
  cudaStream_t stream_ = nullptr;
  MoveDescriptor* ring_ = nullptr;        // host view
  MoveDescriptor* ring_dev_ = nullptr;    // device view
  MoverHostControl* host_ = nullptr;      // host view
  MoverHostControl* host_dev_ = nullptr;  // device view
  MoverDeviceState* dev_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t head_ = 0;                  // next index to post (the tail the engine sees after the doorbell)
  uint64_t free_until_ = 0;            // indexes below this have a slot the engine has read
  std::atomic<uint64_t> launched_{0};  // generation of the latest launch (read by launches())
};

// Throws InvalidArgument naming what is wrong with `d` (a descriptor built without describe()).
void check_descriptor(const MoveDescriptor& d);

}  // namespace anyep_emunic::gpu
