// anyep/emunic/env.h — every setting of the emulated NIC, read from the environment in one place
// (env.cpp; documented in emunic/README.md). Read once, when libfabric loads the provider.
#pragma once

#include <cstdint>
#include <string>

namespace anyep_emunic {

enum class Profile : uint8_t {
  kEfa = 0,    // unordered, 4-byte CQ data, FI_HMEM, no atomics, packets of a message shuffled
  kVerbs = 1,  // ordered (RAW, WAW, SAW, ...), atomics
};

enum class Mutation : uint8_t {
  kNone = 0,
  // Negative control: the writer's completion is raised once its packets left, and the target's
  // remote CQ entry when the first packet arrived, both before the data is in place.
  kEarlyCompletion = 1,
};

struct Config {
  Profile profile = Profile::kEfa;    // ANYEP_EMUNIC_PROFILE=efa|verbs
  double gbps = 400;                  // ANYEP_EMUNIC_GBPS: link rate per port
  double latency_us = 2;              // ANYEP_EMUNIC_LATENCY_US: one-way wire latency per message
  uint32_t ports = 1;                 // ANYEP_EMUNIC_PORTS: domains (one per port) fi_getinfo lists
  uint32_t post_ns = 0;               // ANYEP_EMUNIC_POST_NS: extra CPU time spent in every post
  uint32_t tx_depth = 256;            // ANYEP_EMUNIC_TX_DEPTH: transmit queue entries per endpoint
  uint64_t seed = 1;                  // ANYEP_EMUNIC_SEED: seeds the packet shuffle (efa)
  uint32_t timeout_ms = 30000;        // ANYEP_EMUNIC_TIMEOUT_MS: no ack for this long: error completion
  bool mr_local = true;               // ANYEP_EMUNIC_MR_LOCAL=0 drops FI_MR_LOCAL from mr_mode
  Mutation mutate = Mutation::kNone;  // ANYEP_EMUNIC_MUTATE=none|early_completion
  std::string error;                  // non-empty: a variable had a bad value (fi_getinfo then fails)
};

// The configuration, parsed on first use. A bad value leaves the defaults and sets `error` naming
// the variable; the provider then lists no endpoint and logs the error to stderr once.
const Config& config();

const char* profile_name(Profile p);

}  // namespace anyep_emunic
