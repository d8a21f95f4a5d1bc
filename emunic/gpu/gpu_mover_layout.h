// emunic/gpu/gpu_mover_layout.h — what the host side and the GPU mover kernel share: the 32-byte move
// descriptor, the host-mapped control words, the device-side state and the kernel's parameters.
// C++17 (the kernel file includes it too); no runtime types.
#pragma once

#include <cstdint>

#include "common/portability.h"

namespace anyep_emunic::gpu {

namespace port = anyep::port;  // the device primitives (common/portability.h)

// What the engine does after the data of a descriptor is in place (after a system-scope fence):
// store `value` to a 32-bit word, add it to a 32-bit word, or add it to a 64-bit word. Adds let
// several descriptors count into one word (a counter); on host-mapped memory they rely on PCIe
// atomics, so host-visible completions use kStore32.
enum class CompletionOp : uint32_t { kNone = 0, kStore32 = 1, kAdd32 = 2, kAdd64 = 3 };

inline constexpr uint64_t kCompletionOpMask = 3;  // the op travels in the low bits of the word address
// A slot whose `bytes` holds this was read by the engine: the host may write it again. A
// descriptor never carries it (kMaxMoveBytes is one less).
inline constexpr uint32_t kSlotFree = 0xffffffffu;
inline constexpr uint32_t kMaxMoveBytes = 0xfffffffeu;

// One ring slot: 32 bytes, written by the host, read once by the engine.
struct alignas(32) MoveDescriptor {
  uint64_t src;         // GPU address the engine reads (this GPU's memory or a mapped peer's)
  uint64_t dst;         // GPU address the engine writes (same)
  uint64_t completion;  // word address | CompletionOp; 0: no completion
  uint32_t bytes;       // 0..kMaxMoveBytes
  uint32_t value;       // stored into / added to the completion word
};
static_assert(sizeof(MoveDescriptor) == 32, "a descriptor is two 16-byte halves");

// The engine's run state as the host sees it: (launch generation << 2) | phase.
enum MoverPhase : uint64_t { kPhaseRunning = 1, kPhaseExiting = 2, kPhaseStopped = 3 };
ANYEP_HD constexpr uint64_t mover_state(uint64_t generation, uint64_t phase) { return (generation << 2) | phase; }
ANYEP_HD constexpr uint64_t mover_state_generation(uint64_t s) { return s >> 2; }
ANYEP_HD constexpr uint64_t mover_state_phase(uint64_t s) { return s & 3; }

// One word per 128-byte line: the host and the GPU write different lines.
struct alignas(128) MoverLine {
  uint64_t v;
};

// Pinned, mapped host memory.
struct MoverHostControl {
  MoverLine tail;       // host -> engine: descriptors posted (ring index of the next post)
  MoverLine state;      // engine -> host: mover_state(generation, phase)
  MoverLine completed;  // engine -> host: descriptors whose completion was written (for statistics)
};

// A descriptor larger than the split size is copied in chunks by every warp that finds it here.
// `claim` packs (generation:16 | chunks:24 | next chunk:24), so a claim made with a stale view of
// a reused entry fails its compare-and-swap instead of taking a chunk of another move.
struct alignas(128) MoverJob {
  uint64_t claim;
  uint64_t src;
  uint64_t dst;
  uint64_t completion;
  uint32_t bytes;
  uint32_t value;
  uint32_t done;  // chunks finished (this generation)
  uint32_t busy;  // 0: free; 1: taken by a warp that fills it or by the move it holds
};
inline constexpr int kMoverJobs = 16;
inline constexpr uint32_t kMaxChunksPerJob = (1u << 24) - 1;

ANYEP_HD constexpr uint64_t job_claim(uint64_t generation, uint64_t chunks, uint64_t next) {
  return ((generation & 0xffffu) << 48) | ((chunks & 0xffffffu) << 24) | (next & 0xffffffu);
}
ANYEP_HD constexpr uint64_t job_claim_generation(uint64_t c) { return c >> 48; }
ANYEP_HD constexpr uint64_t job_claim_chunks(uint64_t c) { return (c >> 24) & 0xffffffu; }
ANYEP_HD constexpr uint64_t job_claim_next(uint64_t c) { return c & 0xffffffu; }

// Device memory, zeroed at creation. ticket/avail/completed persist across launches; the per-launch
// words (arrived, left, leave) are put back to zero by the last block of each launch.
struct MoverDeviceState {
  MoverLine ticket;     // next ring index a warp may claim (claims move it with compare-and-swap)
  MoverLine avail;      // ring indexes below this are posted (the front warp's copy of the tail)
  MoverLine arrived;    // blocks of this launch that started (the first becomes the front)
  MoverLine left;       // blocks of this launch that finished
  MoverLine leave;      // the front's decision: no work for the idle window, every warp leaves
  MoverLine completed;  // descriptors completed, all launches
  MoverLine jobs_open;  // jobs published and not yet finished: idle warps scan the table only if > 0
  MoverJob jobs[kMoverJobs];
};

// The kernel's parameters (by value).
struct MoverParams {
  const MoveDescriptor* ring;  // device view of the mapped ring
  MoveDescriptor* ring_rw;     // the same, for the "slot read" marks
  MoverHostControl* host;      // device view of the mapped control block
  MoverDeviceState* dev;
  uint64_t ring_mask;    // slots - 1 (a power of two)
  uint64_t generation;   // this launch's number (1, 2, ...)
  uint64_t idle_ns;      // leave after this long without posted work
  uint32_t split_bytes;  // larger descriptors are copied in chunks by many warps
  uint32_t chunk_bytes;
  uint32_t preload;  // 1: return at once (loads the module at creation)
};

}  // namespace anyep_emunic::gpu
