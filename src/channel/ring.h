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

namespace anyep::channel {

// Filled in by a producer whose wait timed out, read by the host (Channel::check_errors).
// The fields are written before `code` (release), so a host that sees a code sees fields written
// no earlier than it. If several producers of one ring time out together, the fields may come
// from different producers; each value is still a true observation of that ring.
struct RingError {
  uint64_t code;  // 0: none; kRingErrorPushTimeout or kRingErrorDoneTimeout
  uint64_t ring_id;
  uint64_t index;          // the index the producer waited for (to write, or to retire)
  uint64_t observed_tail;  // consumer tail when it gave up
};
inline constexpr uint64_t kRingErrorPushTimeout = 1;  // push: no free slot within timeout_ns
inline constexpr uint64_t kRingErrorDoneTimeout = 2;  // wait_done: command not retired in time

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
//
// A push that timed out leaves its claimed index unpublished: the consumer waits at that index
// forever, so the ring is dead from then on (the error record says why; the proxy reports it).
struct RingHandle {
  TransferCmd* slots;     // producer's view (device pointer of mapped host memory for GPUs)
  RingShared* shared;     // producer's view of the consumer state
  uint64_t* head;         // claim counter
  uint64_t* cached_tail;  // last tail a producer read from `shared->tail` (only moves forward)
  uint32_t capacity;      // power of two
  uint32_t ring_id;
  uint64_t timeout_ns;  // bound on a producer's wait for a free slot

  // Publish `cmd`; returns its index, or kPushFailed if no slot freed up within timeout_ns (the
  // error record then names the ring, the index and the tail seen). Successive pushes of one
  // thread into one ring get increasing indices, so the consumer sees them in that order.
  [[nodiscard]] ANYEP_HD ANYEP_INLINE uint64_t push(const TransferCmd& cmd) const {
    // Relaxed claim: atomicity is all we need; publication order comes from the slot store.
    return publish(port::atomic_add_device(head, 1), cmd);
  }

  // Warp-cooperative push: every active lane of the warp pushes its own `cmd`. Lanes that push
  // into the same ring (same `head`) are grouped and their group leader claims a run of slots
  // with ONE atomic; lanes take them in lane order, so lane order is index order within a group.
  // Lanes may name different rings (e.g. lanes of one warp that drifted to different loop
  // iterations and reconverged here): each ring gets its own claim. Returns this lane's index or
  // kPushFailed. On the host it is push().
  [[nodiscard]] ANYEP_HD ANYEP_INLINE uint64_t push_warp(const TransferCmd& cmd) const {
#if defined(ANYEP_DEVICE_PASS)
    const uint64_t active = port::warp_active_mask();
    const uint64_t peers = port::warp_match_any(active, reinterpret_cast<uintptr_t>(head));
    const int lane = port::warp_lane();
    const int leader = port::lowest_bit64(peers);
    uint64_t base = 0;
    if (lane == leader) base = port::atomic_add_device(head, static_cast<uint64_t>(port::popcount64(peers)));
    base = port::warp_broadcast(active, base, leader);  // every active lane reads its own leader
    const uint64_t below = peers & ((1ull << lane) - 1);
    // Each lane waits for its own slot: with capacity < warp size the early lanes must publish
    // (and be retired) before the late lanes' slots free up, so no lane waits for the whole run.
    return publish(base + static_cast<uint64_t>(port::popcount64(below)), cmd);
#else
    return push(cmd);
#endif
  }

  // True once the consumer retired command `index` (for QUIET/BARRIER: once it completed).
  ANYEP_HD ANYEP_INLINE bool done(uint64_t index) const { return port::load_acquire_system(&shared->tail) > index; }

  // Bounded wait for done(index); false on timeout (error record filled in).
  [[nodiscard]] ANYEP_HD ANYEP_INLINE bool wait_done(uint64_t index) const {
    const uint64_t start = port::now_ns();
    while (!done(index)) {
      if (port::now_ns() - start > timeout_ns) {
        report_timeout(kRingErrorDoneTimeout, index, port::load_acquire_system(&shared->tail));
        return false;
      }
      port::spin_pause();
    }
    return true;
  }

  // Write `cmd` into the slot of the already claimed index `idx` once that slot is free.
  [[nodiscard]] ANYEP_HD ANYEP_INLINE uint64_t publish(uint64_t idx, const TransferCmd& cmd) const {
    // Slot idx % capacity is free once command idx - capacity retired: tail > idx - capacity.
    // tail <= idx always (idx is claimed, not published), so the unsigned difference is exact.
    // The cached copy only lags the host's tail, so "fits" by the cache is always true; acquire
    // pairs with the release below (device scope), extending the chain host clear -> tail read
    // -> cached_tail -> us, so the consumer's clearing of our slot is ordered before our store.
    uint64_t tail = port::load_acquire_device(cached_tail);
    if (idx - tail >= capacity) {
      // The ring looks full from the cached copy: only now read the host's tail (a PCIe read).
      const uint64_t start = port::now_ns();
      for (;;) {
        // Acquire pairs with the consumer's release of tail: its clearing of our slot is visible.
        tail = port::load_acquire_system(&shared->tail);
        if (idx - tail < capacity) break;
        if (port::now_ns() - start > timeout_ns) {
          report_timeout(kRingErrorPushTimeout, idx, tail);
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

 private:
  ANYEP_HD ANYEP_INLINE void report_timeout(uint64_t code, uint64_t idx, uint64_t tail) const {
    // Fields first, code last (release): a host that sees the code sees the fields. Atomic stores
    // even for the fields: several producers may time out at once.
    port::store_release_system(&shared->error.ring_id, static_cast<uint64_t>(ring_id));
    port::store_release_system(&shared->error.index, idx);
    port::store_release_system(&shared->error.observed_tail, tail);
    port::store_release_system(&shared->error.code, code);
#if defined(ANYEP_DEVICE_PASS)
    printf(
        "anyep: ring %u: producer waited %llu ns for index %llu to %s; consumer tail stuck at %llu "
        "(capacity %u)\n",
        ring_id, static_cast<unsigned long long>(timeout_ns), static_cast<unsigned long long>(idx),
        code == kRingErrorPushTimeout ? "get a free slot" : "retire", static_cast<unsigned long long>(tail), capacity);
#endif
  }
};

}  // namespace anyep::channel
