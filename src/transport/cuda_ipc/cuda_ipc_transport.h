// anyep/src/transport/cuda_ipc/cuda_ipc_transport.h — a GPUDirect-RDMA NIC stand-in for processes
// of one host. Registered GPU memory is shared through CUDA IPC; a write is a copy-engine copy
// on streams this endpoint owns: post_writes only queues it; poll() issues what was queued since
// the last poll (one cudaMemcpyBatchAsync and one CUDA event for all of it) and checks earlier
// events with cudaEventQuery; the immediate goes to the peer through a
// shared-memory ring only after that event has fired, so the peer sees data before immediate.
// Like EFA: no ordering between writes (several streams), no atomics, 32-bit immediates.
// Host memory can be registered too (the proxy's signal records live there): peers in other
// processes write it with process_vm_writev (cross-memory attach: same user; the endpoint allows
// it under Yama with PR_SET_PTRACER), from host memory only, synchronously.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/transport.h"

namespace anyep::transport::cuda_ipc {

struct CudaIpcConfig {
  uint32_t rank = 0;
  uint32_t num_ranks = 1;
  int device = 0;                   // CUDA device of this endpoint; its registrations must live there
  uint32_t max_outstanding = 1024;  // writes + immediates posted but not yet completed (-EAGAIN beyond)
  uint32_t imm_slots = 4096;        // immediates per (src, dst) shared-memory ring (power of two)
  uint32_t num_streams = 2;         // copy streams, round robin per issued batch; the first num_streams of
                                    // the process's pool on the device, shared by all its endpoints
  // The copies queued between two polls go with one cudaMemcpyBatchAsync (CUDA 12.8+ runtime and
  // driver) when true; false, or a runtime that refuses it: one cudaMemcpyAsync per copy.
  bool batch_copies = true;
  double teardown_timeout_s = 10;  // destructor: longest wait for copies still in flight
};

// Creates the endpoint (its copy streams, events and its shared-memory inbox). Throws
// anyep::CudaError when the device cannot be used, anyep::InvalidArgument for bad options.
std::unique_ptr<Transport> make_endpoint(const CudaIpcConfig& options);

}  // namespace anyep::transport::cuda_ipc
