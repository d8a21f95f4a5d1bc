// anyep/src/transport/factory.h — the one way to create a transport endpoint: by name, with one
// options struct per backend, and the chaos wrapper applied here so that every path (tests,
// benchmarks, the LL runtime's proxy) can run under chaos.
//
// Names: one per libfabric provider of common/fabric_providers.h (efa, cxi, verbs, tcp, shm),
// "libfabric" (libfabric with LibfabricConfig::provider, or the first usable of the table's
// auto_pick providers), "cuda-ipc", "loopback". A name that is unknown, or whose backend is not
// built into this binary, is an error that says so; available() asks without creating.
//
// The factory reads no environment variable: TransportSpec::from_env fills the spec from it (the
// caller at the top decides), see docs/environment.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/chaos/chaos_transport.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/libfabric/libfabric_transport.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/transport.h"

namespace anyep::transport {

struct TransportSpec {
  std::string name;  // one of transport_names()
  uint32_t rank = 0;
  uint32_t num_ranks = 1;
  // Backend options; only the one the name selects is used. The factory fills in rank and size
  // (cuda_ipc) and the provider a libfabric name stands for.
  libfabric::LibfabricConfig libfabric;
  cuda_ipc::CudaIpcConfig cuda_ipc;
  loopback::LoopbackConfig loopback;
  // Set: the endpoint is wrapped in the chaos transport (every rank must agree).
  std::optional<chaos::ChaosConfig> chaos;

  // `name` for `rank` of `num_ranks`, with every option the environment sets: chaos from
  // ANYEP_CHAOS_SEED / ANYEP_CHAOS_MAX_DELAY, the libfabric options from ANYEP_FI_NICS and
  // ANYEP_FI_STRIPING, and for the name "libfabric" the provider from ANYEP_FI_PROVIDER.
  static TransportSpec from_env(std::string name, uint32_t rank, uint32_t num_ranks);
};

// Creates the endpoint `spec` names. Throws InvalidArgument for an unknown name or options that
// contradict it, Unsupported when the backend is not built into this binary, and whatever the
// backend throws when it cannot start (e.g. Unsupported for a provider this machine lacks).
std::unique_ptr<Transport> make_transport(const TransportSpec& spec);

// Every name make_transport knows, built here or not.
const std::vector<std::string>& transport_names();

// Whether make_transport(name) can work on this machine: the backend is built in and, for
// libfabric providers, the provider is usable here. If not, *why says why.
bool available(const std::string& name, std::string* why = nullptr);

}  // namespace anyep::transport
