// The one place the emulated NIC reads the environment (emunic/README.md lists every variable).
#include "env.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace anyep_emunic {

namespace {

// Parses `name` as a number in [lo, hi]; unset or empty keeps *out. False (with cfg.error) on a bad value.
bool read_num(Config& cfg, const char* name, double lo, double hi, double* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return true;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v, &end);
  if (errno || end == v || *end || !(d >= lo && d <= hi)) {
    cfg.error =
        std::string(name) + "='" + v + "' is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return false;
  }
  *out = d;
  return true;
}

template <class T>
bool read_int(Config& cfg, const char* name, double lo, double hi, T* out) {
  double d = static_cast<double>(*out);
  if (!read_num(cfg, name, lo, hi, &d)) return false;
  if (d != static_cast<double>(static_cast<uint64_t>(d))) {
    cfg.error = std::string(name) + " must be a whole number";
    return false;
  }
  *out = static_cast<T>(d);
  return true;
}

Config parse() {
  Config c;
  if (const char* p = std::getenv("ANYEP_EMUNIC_PROFILE"); p && *p) {
    if (!std::strcmp(p, "efa"))
      c.profile = Profile::kEfa;
    else if (!std::strcmp(p, "verbs"))
      c.profile = Profile::kVerbs;
    else
      c.error = std::string("ANYEP_EMUNIC_PROFILE='") + p + "' is not one of efa, verbs";
  }
  if (const char* m = std::getenv("ANYEP_EMUNIC_MUTATE"); m && *m) {
    if (!std::strcmp(m, "none"))
      c.mutate = Mutation::kNone;
    else if (!std::strcmp(m, "early_completion"))
      c.mutate = Mutation::kEarlyCompletion;
    else
      c.error = std::string("ANYEP_EMUNIC_MUTATE='") + m + "' is not one of none, early_completion";
  }
  if (const char* l = std::getenv("ANYEP_EMUNIC_MR_LOCAL"); l && *l) {
    if (!std::strcmp(l, "1"))
      c.mr_local = true;
    else if (!std::strcmp(l, "0"))
      c.mr_local = false;
    else
      c.error = std::string("ANYEP_EMUNIC_MR_LOCAL='") + l + "' is not 0 or 1";
  }
  read_num(c, "ANYEP_EMUNIC_GBPS", 0.001, 100000, &c.gbps);
  read_num(c, "ANYEP_EMUNIC_LATENCY_US", 0, 1e6, &c.latency_us);
  read_int(c, "ANYEP_EMUNIC_PORTS", 1, 16, &c.ports);
  read_int(c, "ANYEP_EMUNIC_POST_NS", 0, 1e6, &c.post_ns);
  read_int(c, "ANYEP_EMUNIC_TX_DEPTH", 1, 65536, &c.tx_depth);
  read_int(c, "ANYEP_EMUNIC_SEED", 0, 9e15, &c.seed);
  read_int(c, "ANYEP_EMUNIC_TIMEOUT_MS", 1, 3.6e6, &c.timeout_ms);
  if (!c.error.empty()) std::fprintf(stderr, "emunic: %s; the provider lists no endpoint\n", c.error.c_str());
  return c;
}

}  // namespace

const Config& config() {
  static const Config c = parse();
  return c;
}

const char* profile_name(Profile p) { return p == Profile::kVerbs ? "verbs" : "efa"; }

}  // namespace anyep_emunic
