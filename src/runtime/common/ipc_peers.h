// anyep/src/runtime/common/ipc_peers.h — the connection record a symmetric GPU region is shared with
// (rank, host, GPU PCI id, CUDA IPC handle, size), and opening a peer's region through CUDA IPC
// when it is reachable by direct stores (same host; same GPU or peer access), and the peer table
// that holds what was opened. Used by the LL and HT buffers (the internode HT path through its
// node's HT buffer), each with its own magic so records of one are never taken for the other.
#pragma once

#include <cstdint>
#include <vector>

#include "common/gpu_runtime.h"
#include "runtime/common/region.h"

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

// Every rank's address of a symmetric region as this rank reaches it by direct stores (its own
// region; a peer's, opened through CUDA IPC; null: not reachable), on the host and as the device
// array the kernels read. close() (or the destructor) closes what open() opened: the owner calls
// it before it frees the memory the mappings' users read (declare it after the regions).
class IpcPeers {
 public:
  IpcPeers() = default;
  // A table of `num_ranks` entries, all null, on the current device; `label` names it in errors.
  IpcPeers(int num_ranks, const char* label);
  ~IpcPeers() { close(); }
  IpcPeers(IpcPeers&& o) noexcept { swap(o); }
  IpcPeers& operator=(IpcPeers&& o) noexcept {
    IpcPeers(static_cast<IpcPeers&&>(o)).swap(*this);  // what this table had is closed
    return *this;
  }
  IpcPeers(const IpcPeers&) = delete;
  IpcPeers& operator=(const IpcPeers&) = delete;

  // Fills the table from every rank's record: `local` for rank `self`; with `open_peers`, each
  // other rank's region that open_ipc_peer reaches from `device`; null otherwise. Then uploads it.
  // Throws CudaError naming the rank when an open fails (what was opened stays until close()).
  void open(const std::vector<IpcRecord>& recs, int self, uint8_t* local, int device, bool open_peers, const char* who);
  // Closes the mappings open() made, clears the table and frees its device copy.
  void close() noexcept;

  int size() const { return static_cast<int>(host_.size()); }
  uint8_t* operator[](int r) const { return host_[r]; }
  // The first rank with no direct path, or -1 when every rank has one.
  int first_unreachable() const;
  uint8_t** device_table() const { return table_.as<uint8_t*>(); }

 private:
  void swap(IpcPeers& o) noexcept {
    host_.swap(o.host_);
    opened_.swap(o.opened_);
    table_.swap(o.table_);
  }
  std::vector<uint8_t*> host_;
  std::vector<bool> opened_;  // host_[r] came from cudaIpcOpenMemHandle
  DeviceRegion table_;
};

}  // namespace anyep::runtime
