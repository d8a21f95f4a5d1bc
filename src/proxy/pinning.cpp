#include "proxy/pinning.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "common/env.h"
#include "common/error.h"
#include "common/read_line.h"

namespace anyep::proxy {

std::vector<int> parse_cpu_list(const std::string& s, const std::string& what) {
  std::vector<int> cpus;
  for (size_t pos = 0; pos <= s.size();) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    size_t dash = item.find('-');
    try {
      size_t used = 0;
      int a = std::stoi(item.substr(0, dash), &used);
      int b = a;
      if (dash != std::string::npos) b = std::stoi(item.substr(dash + 1), &used);
      if (a < 0 || b < a || b > 65535) throw std::out_of_range(item);
      for (int c = a; c <= b; ++c) cpus.push_back(c);
    } catch (const std::logic_error&) {
      throw InvalidArgument(what + ": '" + s + "' is not a CPU list (expected e.g. 0-3,8)");
    }
  }
  if (cpus.empty()) throw InvalidArgument(what + ": '" + s + "' names no CPU");
  return cpus;
}

std::vector<int> proxy_cpus(const std::vector<int>& config_cpus, int numa_node) {
  const env::CpuChoice choice = env::get_cpu_choice("ANYEP_PROXY_CPUS");
  if (choice.mode == env::CpuChoice::Mode::kNone) return {};
  if (choice.mode == env::CpuChoice::Mode::kList) return choice.cpus;
  if (!config_cpus.empty()) return config_cpus;
  if (numa_node < 0) return {};
  const std::string line = read_first_line("/sys/devices/system/node/node" + std::to_string(numa_node) + "/cpulist");
  if (line.empty()) return {};
  return parse_cpu_list(line, "NUMA node " + std::to_string(numa_node) + " cpulist");
}

bool pin_current_thread(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace anyep::proxy
