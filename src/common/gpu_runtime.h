// anyep/src/common/gpu_runtime.h — the GPU runtime API for host code, in one spelling: CUDA's.
//
// Host code (the channel, the LL runtime, the cuda-ipc transport, GPU tests and benchmarks)
// includes this header instead of <cuda_runtime.h> and calls cudaX as before. In a CUDA build
// that is the CUDA runtime itself. In a HIP build (ANYEP_GPU=hip: AMD GPUs, ROCm) each cudaX used
// in anyep is mapped below to its hipX twin, which has the same arguments and meaning; a name
// missing from the list fails the HIP build (CI's hip stage), and is added here, never spelled
// hipX at a call site. What differs in shape between the two lives in anyep::gpu.
//
// ANYEP_HAVE_GPU_RUNTIME is 1 where a runtime is configured (the target links anyep_gpu_runtime,
// which defines ANYEP_GPU_CUDA or ANYEP_GPU_HIP; or the file is device code), else 0: headers
// shared with CPU-only code (e.g. kernels/ll/kernels.h) declare their launch functions under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(ANYEP_GPU_HIP) || defined(__HIPCC__)
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1  // hip::host defines it for host code; HIP device code gets it from the compiler
#endif
#include <hip/hip_runtime_api.h>
#define ANYEP_HAVE_GPU_RUNTIME 1
#define ANYEP_GPU_RUNTIME_NAME "HIP"

// Types and constants.
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorNotReady hipErrorNotReady
#define cudaErrorNotSupported hipErrorNotSupported
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaStream_t hipStream_t
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaEvent_t hipEvent_t
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaIpcMemHandle_t hipIpcMemHandle_t
#define cudaIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess
#define cudaDeviceProp hipDeviceProp_t
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDefault hipMemcpyDefault
// Mapped host memory is shared with the GPU at system scope (rings, signals): coherent
// (fine-grained) on AMD too, as CUDA's is, whatever HIP_HOST_COHERENT says.
#define cudaHostAllocMapped (hipHostMallocMapped | hipHostMallocCoherent)
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaPointerAttributes hipPointerAttribute_t
#define cudaMemoryTypeDevice hipMemoryTypeDevice

// Devices and errors.
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceGetByPCIBusId hipDeviceGetByPCIBusId
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaGetLastError hipGetLastError
#define cudaFuncAttributes hipFuncAttributes
#define cudaFuncGetAttributes hipFuncGetAttributes
#define cudaFuncSetAttribute hipFuncSetAttribute  // called with the kernel cast to const void*
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString

// Memory. cudaHostAlloc's flags are hipHostMalloc's (above).
#define cudaMalloc hipMalloc
#define cudaMallocAsync hipMallocAsync
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc
#define cudaMallocHost(ptr, size) hipHostMalloc((ptr), (size), hipHostMallocDefault)
#define cudaFreeHost hipHostFree
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaIpcGetMemHandle hipIpcGetMemHandle
#define cudaIpcOpenMemHandle hipIpcOpenMemHandle
#define cudaIpcCloseMemHandle hipIpcCloseMemHandle
#define cudaPointerGetAttributes hipPointerGetAttributes

// Streams and events.
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamQuery hipStreamQuery
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaEventCreate hipEventCreate
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventQuery hipEventQuery
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime

// Graph capture (tests that check a kernel launched beside a capture does not disturb it).
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamCaptureModeGlobal hipStreamCaptureModeGlobal
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaGraphGetNodes hipGraphGetNodes
#define cudaGraphInstantiate hipGraphInstantiateWithFlags  // CUDA 12's (exec, graph, flags) form
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy

#elif defined(ANYEP_GPU_CUDA) || defined(__CUDACC__)
#include <cuda.h>          // driver types only (CUdeviceptr, CUresult): entry points come through cudart
#include <cuda_runtime.h>  // the C API and its typed C++ overloads (cudaMalloc(T**, ...))
#define ANYEP_HAVE_GPU_RUNTIME 1
#define ANYEP_GPU_RUNTIME_NAME "CUDA"
#else
#define ANYEP_HAVE_GPU_RUNTIME 0
#endif

#if ANYEP_HAVE_GPU_RUNTIME
namespace anyep::gpu {

// The memory type a pointer-attributes query found (the field is `type` in CUDA and in HIP >= 6,
// `memoryType` before): compare with cudaMemoryTypeDevice.
inline int memory_type(const cudaPointerAttributes& a) {
#if (defined(ANYEP_GPU_HIP) || defined(__HIPCC__)) && HIP_VERSION_MAJOR < 6
  return static_cast<int>(a.memoryType);
#else
  return static_cast<int>(a.type);
#endif
}

// The whole allocation that contains device pointer `p` (IPC handles name allocations, not
// pointers into them). Returns an empty string on success, else what failed.
inline std::string allocation_range(const void* p, uint64_t* base, size_t* size) {
#if defined(ANYEP_GPU_HIP) || defined(__HIPCC__)
  hipDeviceptr_t b = nullptr;
  if (const hipError_t e = hipMemGetAddressRange(&b, size, const_cast<void*>(p)); e != hipSuccess) {
    (void)hipGetLastError();
    return std::string("hipMemGetAddressRange failed: ") + hipGetErrorName(e);
  }
  *base = reinterpret_cast<uint64_t>(b);
  return {};
#else
  // cuMemGetAddressRange through the runtime's driver entry point, so nothing links libcuda (the
  // library must load on machines without a GPU driver).
  using GetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const GetAddressRangeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<GetAddressRangeFn>(f);
  }();
  if (!fn) return "cuMemGetAddressRange is not available from the driver";
  CUdeviceptr b = 0;
  if (const CUresult r = fn(&b, size, reinterpret_cast<CUdeviceptr>(p)); r != CUDA_SUCCESS) {
    std::string msg = "cuMemGetAddressRange failed with CUresult ";
    msg += std::to_string(static_cast<int>(r));
    return msg;
  }
  *base = static_cast<uint64_t>(b);
  return {};
#endif
}

}  // namespace anyep::gpu
#endif
