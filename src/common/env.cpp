#include "common/env.h"

#include <sched.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/fabric_providers.h"

namespace anyep::env {

namespace {
constexpr double kMaxTimeoutS = 86400;  // one day: longer is a typo, not a wait anyone means
}  // namespace

const std::vector<VarInfo>& all_vars() {
  using T = Type;
  // ANYEP_FI_PROVIDER takes the providers of common/fabric_providers.h, or empty (choose).
  static const std::string fi_meaning = "libfabric provider; empty: first of " + fabric::auto_pick_list();
  static const std::string fi_choices = [] {
    std::string c;
    for (const fabric::Provider& p : fabric::kProviders) c.append("|").append(p.fi_name);
    return c;
  }();
  // Keep sorted by name; docs/environment.md mirrors this table (names, defaults, ranges).
  static const std::vector<VarInfo> vars = {
      {"ANYEP_BOOTSTRAP_SECRET", "",
       "TCP bootstrap: the per-job secret every rank's hello must carry (at most 64 bytes; same value on every rank, "
       "set by the launcher); empty: none",
       T::kSecret, 0, 64},
      {"ANYEP_CHAOS_MAX_DELAY", "8", "chaos transport: an op or immediate is held 0..N poll() calls (seeded)",
       T::kCount, 0, 1000000},
      {"ANYEP_CHAOS_SEED", "",
       "wrap every endpoint made from the environment (TransportSpec::from_env: LL runtime proxy path, main job, "
       "benchmarks) in the chaos transport (reorders deliveries like EFA SRD) with this seed; empty: off",
       T::kSeed},
      {"ANYEP_CUDA_IPC_BATCH", "1",
       "cuda-ipc transport: 1 issues the copies queued between two polls with one cudaMemcpyBatchAsync (CUDA 12.8+), "
       "0 one cudaMemcpyAsync per copy",
       T::kBool},
      {"ANYEP_FI_NICS", "1", "libfabric: NICs (domains) striped per endpoint set; 0: every domain the provider lists",
       T::kCount, 0, 64},
      {"ANYEP_FI_PROVIDER", "", fi_meaning.c_str(), T::kEnum, 0, 0, fi_choices.c_str()},
      {"ANYEP_FI_STRIPING", "bytes",
       "libfabric multi-NIC striping: bytes (fewest bytes in flight), dest (NIC by peer rank), rr (round robin)",
       T::kEnum, 0, 0, "bytes|dest|rr"},
      {"ANYEP_HT_NET_PATH", "libfabric",
       "HT internode: the transport of the rail exchange between nodes through the proxy: libfabric (the buffer in "
       "pinned host memory when the provider cannot register GPU memory); cuda-ipc is refused (its copies stall "
       "behind the process's blocking CUDA calls)",
       T::kEnum, 0, 0, "libfabric|cuda-ipc"},
      {"ANYEP_HT_RANKS_PER_NODE", "0",
       "HT: ranks per node; 0 detects nodes by hostname + boot id, N makes emulated nodes of N consecutive ranks "
       "(internode mode on one machine, for tests)",
       T::kCount, 0, 1 << 20},
      {"ANYEP_LL_CHECK_INPUTS", "0",
       "LL: 1 checks topk_idx values on the host before each call (a copy and a stream sync; skipped while capturing a "
       "CUDA graph)",
       T::kBool},
      {"ANYEP_LL_LAYOUT", "fast",
       "LL: dispatch receive layout: fast (a region per (expert, source rank): E x T messages) or compact (R x T x "
       "min(16, E/R) messages and route lists: ~5x less memory at DeepEP's shape, one more load per received row)",
       T::kEnum, 0, 0, "fast|compact"},
      {"ANYEP_LL_PATH", "auto",
       "LL: how peers are reached: auto (CUDA IPC where reachable, the proxy over libfabric otherwise), proxy-cuda-ipc "
       "or proxy-libfabric (each process its own node, every peer through the proxy)",
       T::kEnum, 0, 0, "auto|proxy-cuda-ipc|proxy-libfabric"},
      {"ANYEP_LL_SMS", "0",
       "LL: thread blocks (one per SM) the LL kernels use; 0: every SM (more than the GPU has: every SM)", T::kCount, 0,
       1024},
      {"ANYEP_LL_TRACE", "0",
       "LL Python extension: one stderr line per step of each call and a native backtrace on a fatal signal "
       "(diagnostics)",
       T::kBool},
      {"ANYEP_PROXY_ATOMICS", "emulated",
       "proxy SIGNALs: emulated (the receiving proxy adds to the counter once the writes it is fenced after landed) or "
       "native (the sending proxy posts the transport's remote atomic add once those writes completed; libfabric "
       "endpoints are then opened with atomics and delivery-complete writes; a transport without either is an error)",
       T::kEnum, 0, 0, "emulated|native"},
      {"ANYEP_PROXY_CPUS", "auto",
       "proxy thread pinning: auto (GPU's NUMA node when known), none, or a CPU list like 0-3,8 (CPUs this process may "
       "run on)",
       T::kCpuList},
      {"ANYEP_PROXY_ORDERING", "auto",
       "receiver ordering: auto (bypass when the transport orders writes), engine, bypass", T::kEnum, 0, 0,
       "auto|engine|bypass"},
      {"ANYEP_PROXY_RANKS_PER_HOST", "0",
       "ranks per host for barriers: 0 detects hosts by hostname + boot id; N splits ranks into emulated hosts of N "
       "consecutive ranks",
       T::kCount, 0, 1 << 20},
      {"ANYEP_PROXY_THREADS", "4", "proxy threads per GPU (each owns rings and its own transport endpoint)", T::kCount,
       1, 64},
      {"ANYEP_TIMEOUT_S", "30", "seconds any wait (device spin, quiet, barrier, bootstrap) may take before it fails",
       T::kDuration, 0, kMaxTimeoutS},
  };
  return vars;
}

namespace {

const char* type_name(Type t) {
  switch (t) {
    case Type::kDuration:
      return "a duration";
    case Type::kCount:
      return "a count";
    case Type::kBool:
      return "a boolean";
    case Type::kEnum:
      return "an enumeration";
    case Type::kSeed:
      return "a seed";
    case Type::kCpuList:
      return "a CPU list";
    case Type::kSecret:
      return "a secret";
  }
  return "?";
}

// The declared entry of `name`, which must have type `want`.
const VarInfo& find(std::string_view name, Type want) {
  for (const auto& v : all_vars())
    if (name == v.name) {
      if (v.type != want)
        throw InternalError("environment variable " + std::string(name) + " is declared in src/common/env.cpp as " +
                            type_name(v.type) + " but read as " + type_name(want));
      return v;
    }
  throw InternalError("environment variable " + std::string(name) + " is read but not declared in src/common/env.cpp");
}

std::string raw(const VarInfo& info) {
  const char* v = std::getenv(info.name);
  return (v && *v) ? std::string(v) : std::string(info.default_value);
}

[[noreturn]] void refuse(const VarInfo& info, const std::string& value, const std::string& why) {
  throw InvalidArgument(std::string(info.name) + "='" + value + "' " + why);
}

// Optional '-', then decimal digits only: no spaces, no '+', no hex or octal prefixes.
bool is_decimal_integer(const std::string& v) {
  const size_t start = !v.empty() && v[0] == '-' ? 1 : 0;
  if (v.size() == start) return false;
  for (size_t i = start; i < v.size(); ++i)
    if (v[i] < '0' || v[i] > '9') return false;
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t end = s.find(sep, pos);
    out.push_back(s.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) return out;
    pos = end + 1;
  }
}

std::string choices_text(const VarInfo& v) {
  std::string out;
  for (const std::string& c : split(v.choices, '|')) {
    if (!out.empty()) out += ", ";
    out += c.empty() ? "(empty)" : c;
  }
  return out;
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// "0-3,8" for a sorted list of CPUs.
std::string cpu_ranges(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) {  // appended piecewise: `"-" + std::to_string(...)` trips GCC 12's -Wrestrict false positive at -O3
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

// CPUs this process may run on (pinning to any other fails).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

}  // namespace

std::string range_text(const VarInfo& v) {
  switch (v.type) {
    case Type::kDuration:
      return "> " + number_text(v.min) + " and <= " + number_text(v.max) + " s";
    case Type::kCount:
      return std::to_string(static_cast<int64_t>(v.min)) + ".." + std::to_string(static_cast<int64_t>(v.max));
    case Type::kBool:
      return "0 or 1";
    case Type::kEnum:
      return choices_text(v);
    case Type::kSeed:
      return "(empty) or 0..2^64-1";
    case Type::kCpuList:
      return "auto, none, or a CPU list";
    case Type::kSecret:
      return "text of at most " + std::to_string(static_cast<int64_t>(v.max)) + " bytes";
  }
  return "?";
}

double get_duration_s(std::string_view name) {
  const VarInfo& info = find(name, Type::kDuration);
  const std::string v = raw(info);
  bool ok = !v.empty() && ((v[0] >= '0' && v[0] <= '9') || v[0] == '.' || v[0] == '-');
  for (char c : v) ok = ok && ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-');
  char* end = nullptr;
  errno = 0;
  const double x = ok ? std::strtod(v.c_str(), &end) : 0;
  if (!ok || *end) refuse(info, v, "is not a number of seconds");
  if (!std::isfinite(x)) refuse(info, v, "is not a finite number of seconds");
  if (errno == ERANGE || !(x > info.min) || x > info.max)  // ERANGE here: too small to represent
    refuse(info, v, "is out of range: expected seconds " + range_text(info));
  return x;
}

uint64_t get_duration_ns(std::string_view name) {
  // get_duration_s bounds the value (<= a day), so the product fits in 64 bits before the cast.
  const double s = get_duration_s(name);
  return static_cast<uint64_t>(s * 1e9);
}

int64_t get_count(std::string_view name) {
  const VarInfo& info = find(name, Type::kCount);
  const std::string v = raw(info);
  if (!is_decimal_integer(v)) refuse(info, v, "is not a decimal integer (expected " + range_text(info) + ")");
  errno = 0;
  const long long x = std::strtoll(v.c_str(), nullptr, 10);
  if (errno == ERANGE || static_cast<double>(x) < info.min || static_cast<double>(x) > info.max)
    refuse(info, v, "is out of range: expected " + range_text(info));
  return x;
}

bool get_bool(std::string_view name) {
  const VarInfo& info = find(name, Type::kBool);
  const std::string v = raw(info);
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  refuse(info, v, "is not a boolean (use 0/1)");
}

std::string get_enum(std::string_view name) {
  const VarInfo& info = find(name, Type::kEnum);
  // Only an unset variable takes the default; raw() also maps the empty value to it, which is the
  // empty choice where one is declared.
  const std::string v = raw(info);
  for (const std::string& c : split(info.choices, '|'))
    if (v == c) return v;
  refuse(info, v, "is not one of " + choices_text(info));
}

std::optional<uint64_t> get_seed(std::string_view name) {
  const VarInfo& info = find(name, Type::kSeed);
  const std::string v = raw(info);
  if (v.empty()) return std::nullopt;
  if (!is_decimal_integer(v) || v[0] == '-')
    refuse(info, v, "is not a seed (expected empty for off, or a decimal integer 0..2^64-1)");
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
  if (errno == ERANGE) refuse(info, v, "is out of range: a seed is 0..2^64-1");
  return static_cast<uint64_t>(x);
}

std::string get_secret(std::string_view name) {
  const VarInfo& info = find(name, Type::kSecret);
  const std::string v = raw(info);
  // The value is never echoed: a message with it would leak the secret into logs.
  if (v.size() > static_cast<size_t>(info.max))
    throw InvalidArgument(std::string(info.name) + " is " + std::to_string(v.size()) + " bytes long, more than " +
                          std::to_string(static_cast<int64_t>(info.max)));
  for (const unsigned char ch : v)
    if (ch < 0x21 || ch > 0x7e)
      throw InvalidArgument(std::string(info.name) +
                            " holds a byte that is not printable ASCII (spaces and control "
                            "characters are refused)");
  return v;
}

CpuChoice get_cpu_choice(std::string_view name) {
  const VarInfo& info = find(name, Type::kCpuList);
  const std::string v = raw(info);
  CpuChoice out;
  if (v == "auto") return out;
  if (v == "none") {
    out.mode = CpuChoice::Mode::kNone;
    return out;
  }
  out.mode = CpuChoice::Mode::kList;
  const std::string form = "is not auto, none or a CPU list (e.g. 0-3,8)";
  for (const std::string& item : split(v, ',')) {
    const size_t dash = item.find('-');
    const std::string a = item.substr(0, dash), b = dash == std::string::npos ? a : item.substr(dash + 1);
    if (!is_decimal_integer(a) || !is_decimal_integer(b) || a[0] == '-' || b[0] == '-' || a.size() > 9 || b.size() > 9)
      refuse(info, v, form);
    const int lo = std::atoi(a.c_str()), hi = std::atoi(b.c_str());
    if (hi < lo) refuse(info, v, "has the range " + item + " running backwards");
    if (hi >= CPU_SETSIZE)
      refuse(info, v,
             "names CPU " + std::to_string(hi) + ", beyond the " + std::to_string(CPU_SETSIZE) +
                 " CPUs a process can be pinned to");
    for (int c = lo; c <= hi; ++c) out.cpus.push_back(c);
  }
  const std::vector<int> allowed = allowed_cpus();
  for (int c : out.cpus) {
    bool found = false;
    for (int a : allowed) found = found || a == c;
    if (!found)
      refuse(info, v,
             "names CPU " + std::to_string(c) + ", which this process cannot run on (it may run on " +
                 (allowed.empty() ? std::string("no CPU it can list") : cpu_ranges(allowed)) + ")");
  }
  return out;
}

}  // namespace anyep::env
