// anyep/cli/gpus.h — the GPUs this process sees (CUDA runtime; none in a build without CUDA).
#pragma once

#include <string>
#include <vector>

namespace anyep::cli {

struct Gpu {
  int ordinal = 0;
  std::string name, pci;  // "NVIDIA H100 80GB HBM3", "0000:18:00.0"
  int numa_node = -1;     // from /sys/bus/pci/devices/<pci>/numa_node; -1 unknown
  double memory_gib = 0;
  int sms = 0;
  std::vector<bool> peer;  // peer[j]: this GPU can access GPU j's memory (NVLink or PCIe P2P)
};

// Every visible GPU; empty with *why saying why (no driver, no device, built without CUDA).
std::vector<Gpu> list_gpus(std::string* why);

// The NUMA node of a PCI device from sysfs, -1 when unknown.
int pci_numa_node(const std::string& pci);

}  // namespace anyep::cli
