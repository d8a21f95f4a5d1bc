#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace anyep::env {

const std::vector<VarInfo>& all_vars() {
  // Keep sorted by name; docs/environment.md mirrors this table.
  static const std::vector<VarInfo> vars = {
      {"ANYEP_BOOTSTRAP_SECRET", "", "TCP bootstrap: the per-job secret every rank's hello must carry (at most 64 bytes; same value on every rank, set by the launcher); empty: none"},
      {"ANYEP_CHAOS_MAX_DELAY", "8", "chaos transport: an op or immediate is held 0..N poll() calls (seeded)"},
      {"ANYEP_CHAOS_SEED", "", "wrap every endpoint made from the environment (TransportSpec::from_env: LL runtime proxy path, main job, benchmarks) in the chaos transport (reorders deliveries like EFA SRD) with this seed; empty: off"},
      {"ANYEP_FI_NICS", "1", "libfabric: NICs (domains) striped per endpoint set; 0: every domain the provider lists"},
      {"ANYEP_FI_PROVIDER", "", "libfabric provider (efa, verbs;ofi_rxm, cxi, tcp, tcp;ofi_rxm, shm); empty: first of efa, cxi, verbs;ofi_rxm, tcp;ofi_rxm"},
      {"ANYEP_FI_STRIPING", "bytes", "libfabric multi-NIC striping: bytes (fewest bytes in flight), dest (NIC by peer rank), rr (round robin)"},
      {"ANYEP_LL_CHECK_INPUTS", "0", "LL: 1 checks topk_idx values on the host before each call (a copy and a stream sync; skipped while capturing a CUDA graph)"},
      {"ANYEP_LL_PATH", "auto", "LL: how peers are reached: auto (CUDA IPC where reachable, the proxy over libfabric otherwise), proxy-cuda-ipc or proxy-libfabric (each process its own node, every peer through the proxy)"},
      {"ANYEP_LL_SMS", "0", "LL: thread blocks (one per SM) the LL kernels use; 0: every SM"},
      {"ANYEP_LL_TRACE", "0", "LL Python extension: one stderr line per step of each call and a native backtrace on a fatal signal (diagnostics)"},
      {"ANYEP_PROXY_CPUS", "auto", "proxy thread pinning: auto (GPU's NUMA node when known), none, or a CPU list like 0-3,8"},
      {"ANYEP_PROXY_ORDERING", "auto", "receiver ordering: auto (bypass when the transport orders writes), engine, bypass"},
      {"ANYEP_PROXY_RANKS_PER_HOST", "0", "ranks per host for barriers: 0 detects hosts by hostname + boot id; N splits ranks into emulated hosts of N consecutive ranks"},
      {"ANYEP_PROXY_THREADS", "4", "proxy threads per GPU (each owns rings and its own transport endpoint)"},
      {"ANYEP_TIMEOUT_S", "30", "seconds any wait (device spin, quiet, barrier, bootstrap) may take before it fails"},
  };
  return vars;
}

namespace {
const VarInfo& find(std::string_view name) {
  for (const auto& v : all_vars())
    if (name == v.name) return v;
  throw InternalError("environment variable " + std::string(name) +
                      " is read but not declared in src/common/env.cpp");
}
std::string raw(std::string_view name) {
  const VarInfo& info = find(name);
  const char* v = std::getenv(info.name);
  return (v && *v) ? std::string(v) : std::string(info.default_value);
}
}  // namespace

std::string get_string(std::string_view name) { return raw(name); }

int64_t get_int(std::string_view name) {
  std::string v = raw(name);
  char* end = nullptr;
  errno = 0;
  // Base 10 only: "010" is ten, not octal eight.
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) throw InvalidArgument(std::string(name) + "='" + v + "' is not an integer");
  if (errno == ERANGE) throw InvalidArgument(std::string(name) + "='" + v + "' is out of range for a 64-bit integer");
  return x;
}

double get_double(std::string_view name) {
  std::string v = raw(name);
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw InvalidArgument(std::string(name) + "='" + v + "' is not a number");
  if (errno == ERANGE || !std::isfinite(x))
    throw InvalidArgument(std::string(name) + "='" + v + "' is not a finite number in range");
  return x;
}

bool get_bool(std::string_view name) {
  std::string v = raw(name);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no" || v.empty()) return false;
  throw InvalidArgument(std::string(name) + "='" + v + "' is not a boolean (use 0/1)");
}

}  // namespace anyep::env
