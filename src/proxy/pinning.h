// anyep/src/proxy/pinning.h — which CPU each proxy thread runs on.
//
// ANYEP_PROXY_CPUS overrides everything: "none" (do not pin), or a list such as "0-3,8,10-11"
// (thread i runs on the i-th CPU, round robin). Otherwise ("auto", the default) threads are pinned
// to the CPUs of the GPU's NUMA node when the caller knows it, round robin, and not pinned when
// it does not (CPU-only runs, tests with many ranks in one process).
#pragma once

#include <string>
#include <vector>

namespace anyep::proxy {

// "0-3,8" -> {0,1,2,3,8}. Throws InvalidArgument naming `what` on malformed input.
std::vector<int> parse_cpu_list(const std::string& s, const std::string& what);

// CPUs for proxy threads: from ANYEP_PROXY_CPUS, else `config_cpus`, else the CPUs of
// `numa_node` (>= 0), else empty (no pinning).
std::vector<int> proxy_cpus(const std::vector<int>& config_cpus, int numa_node);

// Pins the calling thread to `cpu`; returns false (and leaves it unpinned) when the OS refuses.
bool pin_current_thread(int cpu);

}  // namespace anyep::proxy
