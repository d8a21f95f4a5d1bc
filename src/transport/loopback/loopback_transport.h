// anyep/src/transport/loopback/loopback_transport.h — in-process, deterministic backend for unit
// tests: every rank is a Transport object in this process; a write is a memcpy done at post time
// (so writes to a peer land in posting order), its immediate is queued to the peer at the same
// time, and its completion is queued locally. Immediates travel through one lock-free
// single-producer single-consumer queue per (source, destination) endpoint pair (each endpoint is
// driven by one thread), spilling into a locked overflow only when a receiver stops polling: order
// per pair is posting order, and the data is in place before its immediate is seen.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace anyep::transport::loopback {

class Fabric;

// Creates the shared in-process fabric for `num_ranks` endpoints.
std::shared_ptr<Fabric> make_fabric(uint32_t num_ranks);

// Options of a loopback endpoint made through the transport factory.
struct LoopbackConfig {
  // The fabric the ranks of this process share (make_fabric). May stay null for a single rank.
  std::shared_ptr<Fabric> fabric;
};

// The endpoint of `rank` on `fabric` (one per rank; a second call for the same rank throws).
std::unique_ptr<Transport> make_endpoint(const std::shared_ptr<Fabric>& fabric, uint32_t rank);

}  // namespace anyep::transport::loopback
