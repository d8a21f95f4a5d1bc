// emunic/gpu/gpu_mover.cpp — the host side of the GPU mover: the ring, the doorbell and the launches.
#include "gpu_mover.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "common/cuda_check.h"
#include "common/error.h"
#include "common/portability.h"
#include "gpu_mover_kernel.h"

namespace anyep_emunic::gpu {

using anyep::cuda_check;
using anyep::InvalidArgument;
using anyep::TimeoutError;

namespace {

constexpr const char* kWhere = "emunic gpu mover";

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

[[noreturn]] void bad_config(const std::string& what) {
  throw InvalidArgument(std::string(kWhere) + ": config: " + what);
}

void check_config(const GpuMoverConfig& c, int sm_count) {
  if (c.sms < 1 || c.sms > sm_count)
    bad_config("sms=" + std::to_string(c.sms) + " must be in 1.." + std::to_string(sm_count) + " (this GPU's SMs)");
  if (c.threads < 64 || c.threads > kMoverMaxThreads || c.threads % port::kWarpSize != 0)
    bad_config("threads=" + std::to_string(c.threads) + " must be a multiple of " + std::to_string(port::kWarpSize) +
               " in 64.." + std::to_string(kMoverMaxThreads));
  if (c.ring_slots < 64 || c.ring_slots > (1u << 24) || (c.ring_slots & (c.ring_slots - 1)) != 0)
    bad_config("ring_slots=" + std::to_string(c.ring_slots) + " must be a power of two in 64..2^24");
  if (c.idle_us < 1 || c.idle_us > 1000000)
    bad_config("idle_us=" + std::to_string(c.idle_us) + " must be in 1..1000000");
  if (c.chunk_bytes < 4096 || c.chunk_bytes % 16 != 0)
    bad_config("chunk_bytes=" + std::to_string(c.chunk_bytes) + " must be a multiple of 16, at least 4096");
  if (c.split_bytes < c.chunk_bytes)
    bad_config("split_bytes=" + std::to_string(c.split_bytes) +
               " must be at least chunk_bytes=" + std::to_string(c.chunk_bytes));
}

}  // namespace

void check_descriptor(const MoveDescriptor& d) {
  const std::string w = std::string(kWhere) + ": descriptor: ";
  if (d.bytes > kMaxMoveBytes)
    throw InvalidArgument(w + "bytes=" + std::to_string(d.bytes) + " is over the limit " +
                          std::to_string(kMaxMoveBytes));
  if (d.bytes > 0 && (d.src == 0 || d.dst == 0))
    throw InvalidArgument(w + "a move of " + std::to_string(d.bytes) + " bytes has a null " +
                          (d.src == 0 ? "source" : "destination"));
  const uint64_t op = d.completion & kCompletionOpMask;
  const uint64_t addr = d.completion & ~kCompletionOpMask;
  if (op == 0 && addr != 0) throw InvalidArgument(w + "a completion word without a completion op");
  if (op != 0 && addr == 0) throw InvalidArgument(w + "a completion op without a completion word");
  if (op == static_cast<uint64_t>(CompletionOp::kAdd64) && (addr & 7) != 0)
    throw InvalidArgument(w + "the completion word of a 64-bit add is not 8-byte aligned");
}

MoveDescriptor GpuMover::describe(const void* src, void* dst, uint64_t bytes, void* completion_word, CompletionOp op,
                                  uint32_t value) {
  const std::string w = std::string(kWhere) + ": describe: ";
  if (bytes > kMaxMoveBytes)
    throw InvalidArgument(w + "bytes=" + std::to_string(bytes) + " is over the limit " + std::to_string(kMaxMoveBytes) +
                          " (split the move)");
  const uint64_t addr = reinterpret_cast<uint64_t>(completion_word);
  if ((op == CompletionOp::kNone) != (completion_word == nullptr))
    throw InvalidArgument(w + "a completion word needs an op and an op needs a word");
  if (op != CompletionOp::kNone && (addr & 3) != 0)
    throw InvalidArgument(w + "the completion word is not 4-byte aligned");
  MoveDescriptor d{};
  d.src = reinterpret_cast<uint64_t>(src);
  d.dst = reinterpret_cast<uint64_t>(dst);
  d.completion = addr | static_cast<uint64_t>(op);
  d.bytes = static_cast<uint32_t>(bytes);
  d.value = value;
  check_descriptor(d);
  return d;
}

GpuMover::GpuMover(const GpuMoverConfig& config) : config_(config) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), kWhere, "cudaGetDeviceCount");
  if (config.device < 0 || config.device >= count)
    bad_config("device=" + std::to_string(config.device) + " but this machine has " + std::to_string(count) +
               " GPU(s)");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, config.device), kWhere, "cudaGetDeviceProperties");
  check_config(config, prop.multiProcessorCount);
  int prev = 0;
  cuda_check(cudaGetDevice(&prev), kWhere, "cudaGetDevice");
  cuda_check(cudaSetDevice(config.device), kWhere, "cudaSetDevice");
  try {
    setup(prop);
  } catch (...) {
    release();
    cudaSetDevice(prev);
    throw;
  }
  cuda_check(cudaSetDevice(prev), kWhere, "cudaSetDevice (back to the caller's device)");
}

void GpuMover::setup(const cudaDeviceProp& prop) {
  const GpuMoverConfig& config = config_;
  // Over half of an SM's shared memory per block: a second engine block cannot share the SM, so
  // `sms` blocks take exactly `sms` SMs while they run.
  if (config.exclusive_sms) {
    smem_ = prop.sharedMemPerMultiprocessor / 2 + 1024;
    if (smem_ > prop.sharedMemPerBlockOptin) smem_ = prop.sharedMemPerBlockOptin;
    cuda_check(allow_mover_smem(smem_), kWhere, "cudaFuncSetAttribute(max dynamic shared memory)");
  }
  mask_ = config.ring_slots - 1;
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), kWhere, "cudaStreamCreateWithFlags");
  void* p = nullptr;
  cuda_check(cudaHostAlloc(&p, sizeof(MoveDescriptor) * config.ring_slots, cudaHostAllocMapped | cudaHostAllocPortable),
             kWhere, "cudaHostAlloc(ring)");
  ring_ = static_cast<MoveDescriptor*>(p);
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ring_dev_), ring_, 0), kWhere,
             "cudaHostGetDevicePointer(ring)");
  cuda_check(cudaHostAlloc(&p, sizeof(MoverHostControl), cudaHostAllocMapped | cudaHostAllocPortable), kWhere,
             "cudaHostAlloc(control)");
  host_ = static_cast<MoverHostControl*>(p);
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_dev_), host_, 0), kWhere,
             "cudaHostGetDevicePointer(control)");
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&dev_), sizeof(MoverDeviceState)), kWhere, "cudaMalloc(state)");
  cuda_check(cudaMemsetAsync(dev_, 0, sizeof(MoverDeviceState), stream_), kWhere, "cudaMemsetAsync(state)");
  std::memset(static_cast<void*>(host_), 0, sizeof(MoverHostControl));
  for (uint64_t i = 0; i < config.ring_slots; ++i) {
    ring_[i] = MoveDescriptor{};
    ring_[i].bytes = kSlotFree;
  }
  free_until_ = config.ring_slots;
  __atomic_store_n(&host_->state.v, mover_state(0, kPhaseStopped), __ATOMIC_RELEASE);
  // The engine's own stream only: a user's kernels already running must not hold the creation.
  cuda_check(cudaStreamSynchronize(stream_), kWhere, "cudaStreamSynchronize (the state's memset)");
  // Modules load lazily: a first launch made while a user's kernel spins could wait for it. Run
  // the kernel once now (it returns at once) so later launches are plain launches.
  if (config.preload) {
    launch(true);
    cuda_check(cudaStreamSynchronize(stream_), kWhere, "the preload launch");
  }
}

void GpuMover::release() {
  if (stream_) cudaStreamDestroy(stream_);
  if (dev_) cudaFree(dev_);
  if (host_) cudaFreeHost(host_);
  if (ring_) cudaFreeHost(ring_);
  stream_ = nullptr;
  dev_ = nullptr;
  host_ = nullptr;
  ring_ = nullptr;
}

GpuMover::~GpuMover() {
  try {
    quiesce(10ull * 1000 * 1000 * 1000);
  } catch (const std::exception& e) {
    // Freeing memory a running kernel still uses would fault it: leave it allocated.
    std::fprintf(stderr, "%s: not freed: %s\n", kWhere, e.what());
    return;
  }
  release();
}

void GpuMover::launch(bool preload) {
  MoverParams p{};
  p.ring = ring_dev_;
  p.ring_rw = ring_dev_;
  p.host = host_dev_;
  p.dev = dev_;
  p.ring_mask = mask_;
  p.generation = preload ? 0 : launched_.load(std::memory_order_relaxed) + 1;
  p.idle_ns = static_cast<uint64_t>(config_.idle_us) * 1000;
  p.split_bytes = config_.split_bytes;
  p.chunk_bytes = config_.chunk_bytes;
  p.preload = preload ? 1 : 0;
  // The launch goes to the engine's device whatever device the posting thread has current.
  int prev = 0;
  cuda_check(cudaGetDevice(&prev), kWhere, "cudaGetDevice");
  if (prev != config_.device) cuda_check(cudaSetDevice(config_.device), kWhere, "cudaSetDevice");
  const cudaError_t e = launch_mover(p, config_.fence, config_.sms, config_.threads, smem_, stream_);
  if (prev != config_.device) cudaSetDevice(prev);
  cuda_check(e, kWhere, preload ? "preload launch" : "launch");
  if (!preload) launched_.store(p.generation, std::memory_order_relaxed);
}

void GpuMover::refresh_free() {
  // Slot (j & mask) of index j in [free_until_, head_ + slots) still holds index j - slots, which
  // was posted; the engine marks a slot read by storing kSlotFree into its `bytes`.
  const uint64_t end = head_ + mask_ + 1;
  uint64_t j = free_until_;
  while (j < end && __atomic_load_n(&ring_[j & mask_].bytes, __ATOMIC_ACQUIRE) == kSlotFree) ++j;
  free_until_ = j;
}

bool GpuMover::write_slot(const MoveDescriptor& d) {
  if (head_ >= free_until_) {
    refresh_free();
    if (head_ >= free_until_) return false;
  }
  // The engine reads the slot only after the tail covers it: a plain copy is enough. The engine's
  // read marks took the lines ahead away from this core's cache: ask for them back early.
  std::memcpy(static_cast<void*>(ring_ + (head_ & mask_)), &d, sizeof d);
  __builtin_prefetch(ring_ + ((head_ + 8) & mask_), 1);
  ++head_;
  return true;
}

// Publish the tail, then make sure a kernel will read it. Store-fence-load against the kernel's
// store(EXITING)-fence-load(tail): at least one side sees the other's store.
void GpuMover::doorbell() {
  __atomic_store_n(&host_->tail.v, head_, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  const uint64_t s = __atomic_load_n(&host_->state.v, __ATOMIC_ACQUIRE);
  const uint64_t latest = launched_.load(std::memory_order_relaxed);
  // A generation below the latest launch: that launch has not started, and reads the tail when it
  // does. The latest one running: it sees the tail. Otherwise it is leaving or gone: launch again.
  if (mover_state_generation(s) == latest && mover_state_phase(s) != kPhaseRunning) launch(false);
}

PostResult GpuMover::post(const MoveDescriptor& d) {
  check_descriptor(d);
  if (!write_slot(d)) return PostResult::kRingFull;
  doorbell();
  return PostResult::kPosted;
}

size_t GpuMover::post_batch(const MoveDescriptor* d, size_t n) {
  for (size_t i = 0; i < n; ++i) check_descriptor(d[i]);
  size_t k = 0;
  while (k < n && write_slot(d[k])) ++k;
  if (k > 0) doorbell();
  return k;
}

void GpuMover::post_wait(const MoveDescriptor& d, uint64_t timeout_ns) {
  const uint64_t start = steady_ns();
  while (post(d) == PostResult::kRingFull) {
    if (steady_ns() - start > timeout_ns) {
      check();
      throw TimeoutError(std::string(kWhere) + ": post: the ring stayed full for " +
                         std::to_string(timeout_ns / 1000000) + " ms; " + state_text());
    }
    std::this_thread::yield();
  }
}

void GpuMover::check() const {
  const cudaError_t e = cudaStreamQuery(stream_);
  if (e == cudaSuccess || e == cudaErrorNotReady) return;
  cuda_check(e, kWhere, "the mover kernel failed (a descriptor with a bad address?)");
}

void GpuMover::quiesce(uint64_t timeout_ns) {
  const uint64_t start = steady_ns();
  while (true) {
    refresh_free();
    const uint64_t s = __atomic_load_n(&host_->state.v, __ATOMIC_ACQUIRE);
    const bool all_read = free_until_ >= head_ + mask_ + 1;
    const bool stopped =
        mover_state_generation(s) == launched_.load(std::memory_order_relaxed) && mover_state_phase(s) == kPhaseStopped;
    if (all_read && stopped) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_check(e, kWhere, "the mover kernel failed");
    }
    if (steady_ns() - start > timeout_ns) {
      check();
      throw TimeoutError(std::string(kWhere) + ": quiesce: the engine did not drain and stop within " +
                         std::to_string(timeout_ns / 1000000) + " ms; " + state_text());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

uint64_t GpuMover::posted() const { return __atomic_load_n(&host_->tail.v, __ATOMIC_ACQUIRE); }

uint64_t GpuMover::completed() const { return __atomic_load_n(&host_->completed.v, __ATOMIC_ACQUIRE); }

uint64_t GpuMover::launches() const { return launched_.load(std::memory_order_relaxed); }

bool GpuMover::running() const {
  const uint64_t s = __atomic_load_n(&host_->state.v, __ATOMIC_ACQUIRE);
  const uint64_t latest = launched_.load(std::memory_order_relaxed);
  return mover_state_generation(s) < latest || mover_state_phase(s) != kPhaseStopped;
}

std::string GpuMover::state_text() const {
  const uint64_t s = __atomic_load_n(&host_->state.v, __ATOMIC_ACQUIRE);
  static const char* const kPhases[] = {"none", "running", "exiting", "stopped"};
  return "posted=" + std::to_string(posted()) + " slots known read up to " + std::to_string(free_until_) +
         " (ring of " + std::to_string(mask_ + 1) + ") completed=" + std::to_string(completed()) +
         " launches=" + std::to_string(launches()) + " engine state: generation " +
         std::to_string(mover_state_generation(s)) + " " + kPhases[mover_state_phase(s)];
}

}  // namespace anyep_emunic::gpu
