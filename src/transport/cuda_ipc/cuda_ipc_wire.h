// anyep/src/transport/cuda_ipc/cuda_ipc_wire.h — the bytes the cuda-ipc backend exchanges between
// processes of one host: the endpoint address (local_address), the region descriptor (export_mr)
// and the layout of the shared-memory immediate inbox. Host code only; the tests use it too.
//
// All fields are fixed-width and little-endian (every process is on the same host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace anyep::transport::cuda_ipc {

inline constexpr uint32_t kAddressMagic = 0x41504943;  // "CIPA"
inline constexpr uint32_t kRegionMagic = 0x52504943;   // "CIPR"
inline constexpr uint32_t kInboxMagic = 0x49504943;    // "CIPI"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kShmNameBytes = 64;    // POSIX shm name, NUL-terminated
inline constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

// local_address(): who this endpoint is and where its immediate inbox lives.
struct WireAddress {
  uint32_t magic;                  // kAddressMagic
  uint16_t version;                // kWireVersion
  uint16_t device;                 // CUDA device ordinal of the endpoint
  uint32_t rank;                   // rank of the endpoint
  uint32_t num_ranks;              // size of the job it was created for
  uint64_t process_token;          // random per process: equal tokens = same address space
  uint32_t pid;                    // for messages only
  uint32_t inbox_slots;            // immediates per (src, dst) ring of the inbox
  char inbox_name[kShmNameBytes];  // shm_open name of this endpoint's inbox
};
static_assert(sizeof(WireAddress) == 96, "WireAddress is a wire format");

// Device field of a host-memory region (written by peers with process_vm_writev, see below).
inline constexpr uint16_t kHostRegionDevice = 0xffff;

// export_mr(): a registered GPU region, openable by cudaIpcOpenMemHandle in another process; or a
// host region (device == kHostRegionDevice: alloc_base is the exporter's address, ipc_handle
// unused), which peers write with cross-memory attach into the exporter's pid.
struct WireRegion {
  uint32_t magic;                       // kRegionMagic
  uint16_t version;                     // kWireVersion
  uint16_t device;                      // device that owns the memory, or kHostRegionDevice
  uint64_t process_token;               // exporter's process token (same process: use alloc_base directly)
  uint64_t alloc_base;                  // exporter's virtual address of the whole cudaMalloc allocation
  uint64_t offset;                      // region start - alloc_base
  uint64_t length;                      // region length in bytes
  uint8_t ipc_handle[kIpcHandleBytes];  // cudaIpcMemHandle_t of the allocation
};
static_assert(sizeof(WireRegion) == 104, "WireRegion is a wire format");

// Checks of the bytes a peer hands over (cuda_ipc_wire.cpp: plain CPU code, built without CUDA too,
// so the unit tests and the sanitizer builds cover it). Each throws InvalidArgument starting with
// `where` and naming what is wrong.
// addresses[index] of a `num_ranks`-rank job: its size, magic and version, that it is rank `index`
// of a job of that size. The inbox name comes back NUL-terminated.
WireAddress parse_address(const std::vector<uint8_t>& bytes, uint32_t index, uint32_t num_ranks,
                          const std::string& where);
// The descriptor of region `remote_id` of rank `peer`: its size, magic and version.
WireRegion parse_region(const std::vector<uint8_t>& bytes, uint32_t peer, uint32_t remote_id, const std::string& where);

// ---- the immediate inbox: one POSIX shm segment per endpoint, written by every peer ----------
//
//   [InboxHeader][ImmRing for src 0][ImmRing for src 1]...[ImmRing for src num_ranks-1]
//   ImmRing = [RingIndices (128 B)][uint32_t imm[slots]] rounded up to 64 B
//
// Each ring is single-producer (the endpoint of rank `src`, one proxy thread) and
// single-consumer (the inbox owner's poll). `slots` is a power of two.
struct InboxHeader {
  uint32_t magic;    // kInboxMagic, written last by the creator
  uint16_t version;  // kWireVersion
  uint16_t reserved;
  uint32_t num_ranks;  // rings in the segment
  uint32_t slots;      // immediates per ring (power of two)
  uint8_t pad[48];
};
static_assert(sizeof(InboxHeader) == 64, "InboxHeader is a wire format");

struct RingIndices {
  alignas(64) uint64_t head;  // producer: immediates pushed so far (release-stored after the slot)
  alignas(64) uint64_t tail;  // consumer: immediates taken so far (release-stored after the read)
};
static_assert(sizeof(RingIndices) == 128, "RingIndices is a wire format (head and tail on own lines)");

inline constexpr size_t ring_bytes(uint32_t slots) {
  return (sizeof(RingIndices) + size_t{slots} * sizeof(uint32_t) + 63) / 64 * 64;
}
inline constexpr size_t inbox_bytes(uint32_t num_ranks, uint32_t slots) {
  return sizeof(InboxHeader) + size_t{num_ranks} * ring_bytes(slots);
}
inline constexpr size_t ring_offset(uint32_t src, uint32_t slots) {
  return sizeof(InboxHeader) + size_t{src} * ring_bytes(slots);
}

}  // namespace anyep::transport::cuda_ipc
