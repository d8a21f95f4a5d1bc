// anyep/emunic/mover.h — the part of the emulated NIC that touches memory. The engine decides what
// moves where and when (packets, pacing, checks, acks); a mover executes one descriptor: copy bytes
// between a registration and a packet buffer, or apply an atomic at a target word. The host mover
// does both with the CPU; a GPU mover (built separately) plugs in through
// anyep_emunic_make_gpu_mover() and handles the memory interfaces it claims (FI_HMEM_CUDA).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>

namespace anyep_emunic {

struct MoveDesc {
  enum Kind : uint8_t {
    kCopy = 0,    // len bytes from src to dst
    kAtomic = 1,  // count elements of `datatype` at dst combined with src by `op`; old values to result
  };
  Kind kind = kCopy;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t len = 0;  // bytes (kCopy)
  // Where each side lives: FI_HMEM_SYSTEM for host memory, else the registration's interface and device.
  fi_hmem_iface dst_iface = FI_HMEM_SYSTEM;
  fi_hmem_iface src_iface = FI_HMEM_SYSTEM;
  int dst_device = 0;
  int src_device = 0;
  // kAtomic only.
  fi_datatype datatype = FI_UINT64;
  fi_op op = FI_SUM;
  size_t count = 0;
  void* result = nullptr;  // host memory: the old values (fetching atomics), or null
};

class Mover {
 public:
  virtual ~Mover() = default;
  virtual const char* name() const = 0;
  // Whether this mover can reach memory of `iface` (the engine routes each descriptor to the first
  // mover that can reach both its sides).
  virtual bool reaches(fi_hmem_iface iface) const = 0;
  // Executes `d`; returns only once the data is in place (the engine raises completions after).
  // 0 or a negative FI_ error (the engine turns it into an error completion).
  virtual int execute(const MoveDesc& d) = 0;
  // Host memory the engine hands to execute() as packet buffers (the shm segments): a mover that
  // reaches it through its device's mappings (the GPU mover) records it here, and must have let go
  // of it when host_unmapping() returns (the caller unmaps it next).
  virtual void host_mapped(void* /*base*/, size_t /*bytes*/) {}
  virtual void host_unmapping(void* /*base*/) {}
  // Checked when memory of `iface` is registered: 0, or a negative FI_ error when [base, base+len)
  // is not memory of that kind on `device`.
  virtual int check_region(fi_hmem_iface /*iface*/, const void* /*base*/, size_t /*len*/, int /*device*/) { return 0; }
  // Whether the mover applies atomics on memory of `iface` (getinfo refuses FI_HMEM with FI_ATOMIC
  // when the GPU mover does not).
  virtual bool atomics_on(fi_hmem_iface iface) const { return reaches(iface); }
};

// Whether the host mover applies `op` on `datatype` (fi_query_atomic answers from this).
bool host_atomic_supported(fi_datatype datatype, fi_op op);
size_t datatype_size(fi_datatype datatype);  // 0 for a type the host mover does not handle

// The CPU mover: memcpy and __atomic builtins on host memory.
Mover& host_mover();

// The GPU mover when one is linked in (a weak symbol: null otherwise). Made once, on first use.
Mover* gpu_mover();
// Tell the GPU mover, when one is linked in, about packet-buffer memory being mapped or about to
// be unmapped (no-ops otherwise).
void note_host_mapped(void* base, size_t bytes);
void note_host_unmapping(void* base);

}  // namespace anyep_emunic

// Defined by a GPU mover library linked into libemunic-fi.so; the provider checks for it at run time.
extern "C" anyep_emunic::Mover* anyep_emunic_make_gpu_mover() __attribute__((weak));
