// anyep/src/channel/ring.h
//
// One GPU->CPU command ring. Compiles for host and device: CPU producers (tests, the CPU-only
// main job) run exactly the push path that kernels run.
//
// Memory (one ring):
//   slots[capacity]   TransferCmd, pinned host memory mapped into the GPU (written by producers,
//                     read and cleared by the consumer thread)
//   RingShared        pinned host memory: `tail` (written by the consumer only) and the error
//                     record a timed-out producer fills in
//   head, cached_tail producer-private counters: device memory for GPU producers, host memory
//                     for CPU producers (never read by the consumer)
//
// Index protocol: producers claim index i = head++ (device-scope atomic; claims need atomicity,
// not order). Slot i lives at slots[i % capacity]; it may be written once tail > i - capacity,
// i.e. when the consumer has retired command i - capacity and cleared that slot. The consumer
// retires strictly in index order: tail == number of retired commands.
#pragma once

#include <cstdint>

#include "channel/transfer_cmd.h"
#include "common/portability.h"

namespace anyep {

// Filled in by a producer whose wait for a free slot timed out, read by the host.
struct RingError {
  uint64_t code;           // 0: none; kRingErrorPushTimeout
  uint64_t ring_id;
  uint64_t index;          // the index the producer waited to write
  uint64_t observed_tail;  // consumer tail when it gave up
};
inline constexpr uint64_t kRingErrorPushTimeout = 1;

// Consumer-written state, on its own cache lines so producer polls do not disturb slot lines.
struct alignas(64) RingShared {
  uint64_t tail;  // commands retired; release-stored by the consumer after clearing slots
  uint8_t pad0[56];
  RingError error;
  uint8_t pad1[64 - sizeof(RingError)];
};
static_assert(sizeof(RingShared) == 128, "RingShared is two cache lines");

inline constexpr uint64_t kPushFailed = ~0ull;

// Plain-data producer handle: copy it into kernels by value.
struct RingHandle {
  TransferCmd* slots;     // producer's view (device pointer of mapped host memory for GPUs)
  RingShared* shared;     // producer's view of the consumer state
  uint64_t* head;         // claim counter
  uint64_t* cached_tail;  // last tail a producer read from `shared->tail`
  uint32_t capacity;      // power of two
  uint32_t ring_id;
  uint64_t timeout_ns;    // bound on a producer's wait for a free slot

  // Publish `cmd`; returns its index, or kPushFailed if no slot freed up within timeout_ns (the
  // error record then names the ring, the index and the tail seen).
  ANYEP_HD ANYEP_INLINE uint64_t push(const TransferCmd& cmd) const {
    const uint64_t idx = port::atomic_add_device(head, 1);
    uint64_t tail = port::load_acquire_device(cached_tail);
    if (idx - tail >= capacity) {
      // The ring looks full from the cached copy: only now read the host's tail (a PCIe read).
      const uint64_t start = port::now_ns();
      for (;;) {
        // Acquire pairs with the consumer's release of tail: its clearing of our slot is visible.
        tail = port::load_acquire_system(&shared->tail);
        if (idx - tail < capacity) break;
        if (port::now_ns() - start > timeout_ns) {
          report_timeout(idx, tail);
          return kPushFailed;
        }
        port::spin_pause();
      }
      port::atomic_max_release_device(cached_tail, tail);
    }
    // One 16-byte release store at system scope: the command and its publication are one write.
    // Release also orders this thread's earlier payload writes before the command.
    port::store16_release_system(&slots[idx & (capacity - 1)].lo, cmd.lo, cmd.hi);
    return idx;
  }

  // True once the consumer retired command `index` (for QUIET/BARRIER: once it completed).
  ANYEP_HD ANYEP_INLINE bool done(uint64_t index) const {
    return port::load_acquire_system(&shared->tail) > index;
  }

  // Bounded wait for done(index); false on timeout (error record filled in).
  ANYEP_HD ANYEP_INLINE bool wait_done(uint64_t index) const {
    const uint64_t start = port::now_ns();
    while (!done(index)) {
      if (port::now_ns() - start > timeout_ns) {
        report_timeout(index, port::load_acquire_system(&shared->tail));
        return false;
      }
      port::spin_pause();
    }
    return true;
  }

 private:
  ANYEP_HD ANYEP_INLINE void report_timeout(uint64_t idx, uint64_t tail) const {
    // Fields first, code last: a host that sees the code sees the fields. (Atomic stores even
    // for the fields: several producers may time out at once.)
    port::store_release_system(&shared->error.ring_id, static_cast<uint64_t>(ring_id));
    port::store_release_system(&shared->error.index, idx);
    port::store_release_system(&shared->error.observed_tail, tail);
    port::store_release_system(&shared->error.code, kRingErrorPushTimeout);
#if defined(ANYEP_DEVICE_PASS)
    printf("anyep: ring %u: producer waited %llu ns for index %llu, consumer tail stuck at %llu "
           "(capacity %u)\n", ring_id, static_cast<unsigned long long>(timeout_ns),
           static_cast<unsigned long long>(idx), static_cast<unsigned long long>(tail), capacity);
#endif
  }
};

}  // namespace anyep
