// anyep/src/channel/channel.h — host side of the command channel: a set of rings, their memory,
// and the consumer view a proxy thread uses. Host code only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "channel/ring.h"

namespace anyep::channel {

enum class ProducerKind : uint8_t {
  kCpu,  // producers are host threads: every counter lives in host memory
  kGpu,  // producers are kernels: slots/tail in pinned mapped host memory, head in device memory
};

struct ChannelConfig {
  uint32_t num_rings = 1;
  uint32_t capacity = 1024;  // slots per ring; a power of two
  ProducerKind producer = ProducerKind::kCpu;
  int cuda_device = 0;                   // kGpu only
  uint64_t timeout_ns = 30'000'000'000;  // producer wait bound; callers pass ANYEP_TIMEOUT_S's value
};

inline constexpr uint32_t kMaxRings = 1u << 16;
inline constexpr uint32_t kMaxRingCapacity = 1u << 24;  // 256 MiB of slots per ring

// Throws anyep::InvalidArgument naming the first bad field (the Channel constructor calls it).
void validate(const ChannelConfig& cfg);

// The consumer end of one ring. One thread at a time (the proxy thread that owns the ring).
class RingConsumer {
 public:
  RingConsumer(TransferCmd* slots, RingShared* shared, uint32_t capacity, uint32_t ring_id)
      : slots_(slots), shared_(shared), capacity_(capacity), ring_id_(ring_id) {}

  // The oldest unretired command, if published; does not consume it.
  [[nodiscard]] bool poll(TransferCmd* out) const { return peek(0, out); }

  // Command `ahead` places after the oldest unretired one, if published (batch draining).
  [[nodiscard]] bool peek(uint32_t ahead, TransferCmd* out) const {
    if (ahead >= capacity_) return false;  // index tail + ahead cannot be in the ring yet
    const TransferCmd& s = slots_[(tail_ + ahead) & (capacity_ - 1)];
    uint64_t lo, hi;
    port::load16_acquire_system(&s.lo, &lo, &hi);  // acquire: the payload the producer wrote first
    if ((lo & cmd::mask(cmd::kOpBits)) == static_cast<uint64_t>(Op::kEmpty)) return false;
    out->lo = lo;
    out->hi = hi;
    return true;
  }

  // Up to `max` consecutive published commands starting at the oldest; returns how many.
  uint32_t poll_batch(TransferCmd* out, uint32_t max) const {
    uint32_t n = 0;
    while (n < max && peek(n, &out[n])) ++n;
    return n;
  }

  // Retire the `n` oldest commands: clear their slots, then publish the new tail with release so
  // a producer that sees the tail also sees the cleared slots.
  void pop(uint32_t n = 1) {
    for (uint32_t i = 0; i < n; ++i) {
      TransferCmd& s = slots_[(tail_ + i) & (capacity_ - 1)];
      __atomic_store_n(&s.lo, 0, __ATOMIC_RELAXED);
    }
    tail_ += n;
    port::store_release_system(&shared_->tail, tail_);
  }

  uint64_t tail() const { return tail_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t ring_id() const { return ring_id_; }

 private:
  TransferCmd* slots_;
  RingShared* shared_;
  uint32_t capacity_;
  uint32_t ring_id_;
  uint64_t tail_ = 0;
};

// Owns the memory of `num_rings` rings.
class Channel {
 public:
  explicit Channel(const ChannelConfig& cfg);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  uint32_t num_rings() const { return cfg_.num_rings; }
  const ChannelConfig& config() const { return cfg_; }

  // Producer handle for ring `i` (GPU: device pointers, pass to a kernel by value).
  RingHandle producer(uint32_t i) const;
  // All producer handles in one array the GPU can read (kGpu: device memory; kCpu: host memory).
  const RingHandle* producer_array() const { return handles_dev_; }
  // Consumer end of ring `i`.
  RingConsumer& consumer(uint32_t i);

  // Throws anyep::TimeoutError describing the first producer timeout recorded in any ring.
  void check_errors() const;

 private:
  ChannelConfig cfg_;
  void* host_block_ = nullptr;    // slots + RingShared of every ring (pinned when kGpu)
  uint64_t* counters_ = nullptr;  // head, cached_tail pairs (device memory when kGpu)
  RingHandle* handles_dev_ = nullptr;
  std::vector<RingHandle> handles_;
  std::vector<RingConsumer> consumers_;
};

}  // namespace anyep::channel
