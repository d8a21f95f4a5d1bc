// anyep/src/transport/chaos/chaos_transport.h — a wrapper that makes any backend behave like a
// reliable but *unordered* NIC (EFA's SRD): nothing is lost or duplicated, but writes land,
// immediates arrive and local completions surface in a seeded, reproducible, shuffled order.
//
// What it really does (a wrapper cannot slow the inner NIC's data placement down, so it defers
// the posting instead):
//   * post_write / post_imm are validated at once (bad input still fails before the wire), then
//     held in a queue; each held op gets a seeded delay of 0..max_delay poll() calls. On every
//     poll() the ops whose delay ran out are shuffled (seeded) and posted to the inner transport.
//     So write B posted after write A can land (and signal) before A.
//   * immediates the inner transport delivers are held and released the same way, so they also
//     reach the caller out of arrival order; local completions likewise.
//   * an immediate is still released only after its own write's data landed (as on SRD): order
//     between *different* writes is what is lost, never data-before-its-immediate.
// Reproducible: for the same seed and the same sequence of calls and inner results, the same
// decisions are made (in-process over loopback, bit for bit; across processes the inner arrival
// timing varies, the decisions given that timing do not). The source buffer of a held write must
// stay untouched until its completion, as with any NIC.
// Every rank must wrap (or not wrap) alike: exported region descriptors carry the region length
// ahead of the inner descriptor so that bounds are checked at post time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "transport/transport.h"

namespace anyep::transport::chaos {

struct ChaosConfig {
  uint64_t seed = 1;
  uint32_t max_delay = 8;   // an op waits 0..max_delay poll() calls (0: shuffle within a poll only)
  uint32_t max_held = 256;  // outbound ops held at most; beyond it, posts return -EAGAIN until a poll()

  // ANYEP_CHAOS_SEED (and ANYEP_CHAOS_MAX_DELAY); nullopt when the seed is unset (chaos off).
  static std::optional<ChaosConfig> from_env();
};

std::unique_ptr<Transport> make_chaos_transport(std::unique_ptr<Transport> inner, const ChaosConfig& cfg);

// Wraps `inner` when ANYEP_CHAOS_SEED is set (ANYEP_CHAOS_MAX_DELAY tunes it); else returns it as is.
// The transport factory (transport/factory.h) does this for every endpoint it creates.
std::unique_ptr<Transport> maybe_wrap_chaos_from_env(std::unique_ptr<Transport> inner);

}  // namespace anyep::transport::chaos
