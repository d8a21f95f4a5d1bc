#include "channel/channel.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "common/error.h"

#if ANYEP_WITH_GPU
#include "common/cuda_check.h"
#endif

namespace anyep::channel {

namespace {
bool is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

#if ANYEP_WITH_GPU
constexpr const char* kWho = "channel";  // what cuda_check's messages start with
#endif

// Per ring: slots, then RingShared. The slot array is rounded up to a cache line so RingShared
// keeps its 64-byte alignment for every capacity (capacity 2 would otherwise put it at +32).
size_t slot_bytes(uint32_t capacity) { return (size_t{capacity} * sizeof(TransferCmd) + 63) / 64 * 64; }
size_t ring_bytes(uint32_t capacity) { return slot_bytes(capacity) + sizeof(RingShared); }
static_assert(sizeof(RingShared) % 64 == 0, "rings stay cache-line aligned back to back");

// Producer counters per ring: head and cached_tail on separate cache lines, and no ring shares a
// line with another (CPU producers of different rings would otherwise false-share).
constexpr size_t kCounterStride = 64 / sizeof(uint64_t);  // in uint64_t
constexpr size_t kCountersPerRing = 2 * kCounterStride;

std::string fmt_ns(uint64_t ns) {
  if (ns % 1000000000 == 0) return std::to_string(ns / 1000000000) + " s";
  if (ns % 1000000 == 0) return std::to_string(ns / 1000000) + " ms";
  if (ns % 1000 == 0) return std::to_string(ns / 1000) + " us";
  return std::to_string(ns) + " ns";
}
}  // namespace

void validate(const ChannelConfig& cfg) {
  if (cfg.num_rings == 0 || cfg.num_rings > kMaxRings)
    throw InvalidArgument("channel: num_rings must be in 1.." + std::to_string(kMaxRings) + " (got " +
                          std::to_string(cfg.num_rings) + ")");
  if (cfg.capacity < 2 || cfg.capacity > kMaxRingCapacity || !is_pow2(cfg.capacity))
    throw InvalidArgument("channel: capacity must be a power of two in 2.." + std::to_string(kMaxRingCapacity) +
                          " (got " + std::to_string(cfg.capacity) + ")");
  if (cfg.timeout_ns == 0) throw InvalidArgument("channel: timeout_ns must be > 0 (got 0)");
  if (cfg.producer != ProducerKind::kCpu && cfg.producer != ProducerKind::kGpu)
    throw InvalidArgument("channel: producer must be kCpu or kGpu (got " +
                          std::to_string(static_cast<int>(cfg.producer)) + ")");
  if (cfg.producer == ProducerKind::kGpu && cfg.cuda_device < 0)
    throw InvalidArgument("channel: cuda_device must be >= 0 (got " + std::to_string(cfg.cuda_device) + ")");
}

Channel::Channel(const ChannelConfig& cfg) : cfg_(cfg) {
  validate(cfg);

  const size_t per_ring = ring_bytes(cfg.capacity);
  const size_t total = per_ring * cfg.num_rings;
  const size_t counter_bytes = kCountersPerRing * sizeof(uint64_t) * cfg.num_rings;
  const size_t handle_bytes = sizeof(RingHandle) * cfg.num_rings;

  uint8_t* host_dev_view = nullptr;  // how producers address host_block_
  if (cfg.producer == ProducerKind::kGpu) {
#if ANYEP_WITH_GPU
    cuda_check(cudaSetDevice(cfg.cuda_device), kWho, "cudaSetDevice");
    cuda_check(cudaHostAlloc(&host_block_, total, cudaHostAllocMapped | cudaHostAllocPortable), kWho,
               "cudaHostAlloc(ring slots)");
    std::memset(host_block_, 0, total);
    void* dv = nullptr;
    cuda_check(cudaHostGetDevicePointer(&dv, host_block_, 0), kWho, "cudaHostGetDevicePointer");
    host_dev_view = static_cast<uint8_t*>(dv);
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&counters_), counter_bytes), kWho, "cudaMalloc(ring counters)");
    cuda_check(cudaMemset(counters_, 0, counter_bytes), kWho, "cudaMemset(ring counters)");
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&handles_dev_), handle_bytes), kWho, "cudaMalloc(ring handles)");
#else
    throw Unsupported("channel: GPU producers need a GPU build (configure with ANYEP_GPU=cuda or ANYEP_GPU=hip)");
#endif
  } else {
    host_block_ = std::aligned_alloc(64, (total + 63) / 64 * 64);
    counters_ = static_cast<uint64_t*>(std::aligned_alloc(64, (counter_bytes + 63) / 64 * 64));
    handles_dev_ = static_cast<RingHandle*>(std::aligned_alloc(64, (handle_bytes + 63) / 64 * 64));
    if (!host_block_ || !counters_ || !handles_dev_) throw std::bad_alloc();
    std::memset(host_block_, 0, total);
    std::memset(counters_, 0, counter_bytes);
    host_dev_view = static_cast<uint8_t*>(host_block_);
  }

  for (uint32_t i = 0; i < cfg.num_rings; ++i) {
    uint8_t* host_ring = static_cast<uint8_t*>(host_block_) + i * per_ring;
    uint8_t* prod_ring = host_dev_view + i * per_ring;
    const size_t shared_off = slot_bytes(cfg.capacity);
    RingHandle h{};
    h.slots = reinterpret_cast<TransferCmd*>(prod_ring);
    h.shared = reinterpret_cast<RingShared*>(prod_ring + shared_off);
    h.head = counters_ + kCountersPerRing * i;
    h.cached_tail = counters_ + kCountersPerRing * i + kCounterStride;
    h.capacity = cfg.capacity;
    h.ring_id = i;
    h.timeout_ns = cfg.timeout_ns;
    handles_.push_back(h);
    consumers_.emplace_back(reinterpret_cast<TransferCmd*>(host_ring),
                            reinterpret_cast<RingShared*>(host_ring + shared_off), cfg.capacity, i);
  }
  if (cfg.producer == ProducerKind::kGpu) {
#if ANYEP_WITH_GPU
    cuda_check(cudaMemcpy(handles_dev_, handles_.data(), handle_bytes, cudaMemcpyHostToDevice), kWho,
               "cudaMemcpy(ring handles)");
#endif
  } else {
    std::memcpy(handles_dev_, handles_.data(), handle_bytes);
  }
}

Channel::~Channel() {
  if (cfg_.producer == ProducerKind::kGpu) {
#if ANYEP_WITH_GPU
    cudaFree(handles_dev_);
    cudaFree(counters_);
    cudaFreeHost(host_block_);
#endif
  } else {
    std::free(handles_dev_);
    std::free(counters_);
    std::free(host_block_);
  }
}

RingHandle Channel::producer(uint32_t i) const {
  if (i >= cfg_.num_rings)
    throw InvalidArgument("channel: ring " + std::to_string(i) + " out of range (num_rings " +
                          std::to_string(cfg_.num_rings) + ")");
  return handles_[i];
}

RingConsumer& Channel::consumer(uint32_t i) {
  if (i >= cfg_.num_rings)
    throw InvalidArgument("channel: ring " + std::to_string(i) + " out of range (num_rings " +
                          std::to_string(cfg_.num_rings) + ")");
  return consumers_[i];
}

void Channel::check_errors() const {
  const size_t per_ring = ring_bytes(cfg_.capacity);
  for (uint32_t i = 0; i < cfg_.num_rings; ++i) {
    auto* sh =
        reinterpret_cast<RingShared*>(static_cast<uint8_t*>(host_block_) + i * per_ring + slot_bytes(cfg_.capacity));
    // Acquire on the code pairs with the producer's release of it: the fields are visible.
    const uint64_t code = port::load_acquire_system(&sh->error.code);
    if (code == 0) continue;
    const uint64_t idx = __atomic_load_n(&sh->error.index, __ATOMIC_RELAXED);
    const uint64_t tail = __atomic_load_n(&sh->error.observed_tail, __ATOMIC_RELAXED);
    const std::string what = code == kRingErrorPushTimeout ? "for a free slot to write index "
                             : code == kRingErrorDoneTimeout
                                 ? "for the consumer to retire index "
                                 : "(unknown error code " + std::to_string(code) + ") at index ";
    throw TimeoutError("channel ring " + std::to_string(i) + ": a producer waited more than " +
                       fmt_ns(cfg_.timeout_ns) + " " + what + std::to_string(idx) + "; the consumer's tail stayed at " +
                       std::to_string(tail) + " (capacity " + std::to_string(cfg_.capacity) +
                       "): is the proxy thread for this ring running?");
  }
}

}  // namespace anyep::channel
