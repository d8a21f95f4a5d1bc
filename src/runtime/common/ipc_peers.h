// anyep/src/runtime/common/ipc_peers.h — the connection record a symmetric GPU region is shared with
// (rank, host, GPU PCI id, CUDA IPC handle, size), and opening a peer's region through CUDA IPC
// when it is reachable by direct stores (same host; same GPU or peer access). Used by the LL and
// HT buffers, each with its own magic so records of one are never taken for the other.
#pragma once

#include <cstdint>
#include <vector>

#include "common/gpu_runtime.h"

namespace anyep::runtime {

struct IpcRecord {
  uint32_t magic;
  int32_t rank;
  char host[64];
  char pci[32];
  cudaIpcMemHandle_t handle;  // unset when the region is not GPU memory (host-staged)
  int64_t num_bytes;
};

// This rank's record for `base` (GPU memory of `device`; null: no IPC handle).
std::vector<uint8_t> make_ipc_record(uint32_t magic, int rank, int device, void* base, int64_t num_bytes);

// Every rank's record, checked (count, size, magic, rank, symmetric num_bytes); throws
// InvalidArgument naming the rank and `who` ("anyep LL connect").
std::vector<IpcRecord> parse_ipc_records(const std::vector<std::vector<uint8_t>>& infos, uint32_t magic, int num_ranks,
                                         int64_t num_bytes, const char* who);

// Opens a peer's region when it lives on this host and its GPU is reachable from `device`;
// null otherwise (the caller decides whether that is an error). Throws CudaError when the open
// itself fails.
uint8_t* open_ipc_peer(const IpcRecord& rec, int device, const char* who);

}  // namespace anyep::runtime
