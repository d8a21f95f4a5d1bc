#include "gpus.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#ifdef ANYEP_CLI_CUDA
#include <cuda_runtime_api.h>
#endif

namespace anyep::cli {

int pci_numa_node(const std::string& pci) {
  std::string id = pci;
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // CUDA prints an 8-digit domain ("00000000:18:00.0"); sysfs a 4-digit one.
  if (id.size() > 12 && id.find(':') == 8) id = id.substr(4);
  std::ifstream f("/sys/bus/pci/devices/" + id + "/numa_node");
  int n = -1;
  if (f >> n) return n;
  return -1;
}

std::vector<Gpu> list_gpus(std::string* why) {
  std::vector<Gpu> out;
#ifdef ANYEP_CLI_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return out;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found no CUDA device";
  for (int d = 0; d < n; ++d) {
    Gpu g;
    g.ordinal = d;
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) == cudaSuccess) {
      g.name = p.name;
      g.memory_gib = static_cast<double>(p.totalGlobalMem) / (1ull << 30);
      g.sms = p.multiProcessorCount;
    }
    char pci[32] = {};
    if (cudaDeviceGetPCIBusId(pci, sizeof pci, d) == cudaSuccess) g.pci = pci;
    g.numa_node = pci_numa_node(g.pci);
    for (int j = 0; j < n; ++j) {
      int can = j == d;
      if (j != d && cudaDeviceCanAccessPeer(&can, d, j) != cudaSuccess) can = 0;
      g.peer.push_back(can != 0);
    }
    out.push_back(g);
  }
#else
  if (why) *why = "this anyep was built without CUDA (ANYEP_CUDA=OFF)";
#endif
  return out;
}

}  // namespace anyep::cli
