// anyep/src/runtime/common/path.h — how the LL buffer reaches its peers (ANYEP_LL_PATH, docs/ll.md).
// Plain C++ (no CUDA): part of the runtime contract library, unit-tested on every machine.
#pragma once

#include <cstdint>
#include <string>

namespace anyep::runtime {

enum class LLPath : uint8_t {
  kAuto,            // direct stores (CUDA IPC) where reachable; the proxy over libfabric for the rest
  kProxyCudaIpc,    // every peer through the proxy over the cuda-ipc transport (each process a node)
  kProxyLibfabric,  // every peer through the proxy over libfabric (each process a node); the buffer
                    // lives in pinned host memory when the provider cannot register GPU memory
};

// "" reads ANYEP_LL_PATH. Throws InvalidArgument naming the accepted values.
LLPath parse_ll_path(const std::string& name);
const char* ll_path_name(LLPath p);

}  // namespace anyep::runtime
