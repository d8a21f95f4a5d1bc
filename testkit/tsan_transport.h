// anyep/testkit/tsan_transport.h — endpoints for the multi-process workload (tests, the CPU main
// job) whose NIC semantics ThreadSanitizer can follow.
//
// A producer refills a send buffer only after the destination *process* checked the bytes and
// acked (LL double buffering, HT slot credits). The edge that makes this safe runs through another
// process (data on the wire -> remote observer -> ack immediate -> counter), which TSan cannot see:
// it reports libfabric's read of the buffer (sendmsg in tcp, memcpy in shm, on the proxy thread,
// possibly long after the post) as racing with the refill. A suppression keyed on libfabric's
// frame does not hold: on long runs TSan cannot restore that old stack ("failed to restore the
// stack"), and the report then names only anyep frames.
//
// In a TSan build the endpoint made here models the NIC as the contract says it behaves: the
// source bytes of a write are read when it is posted (an explicit TSan read of the range, on the
// posting thread, after the producer's fill was handed over through the ring), the post releases
// a per-process sync object, and a poll() that hands back completions or immediates acquires it
// (nothing can complete or answer before it was posted). The accesses the real NIC code makes
// inside the inner transport's hot-path calls (libfabric's deferred reads and its writes of
// received data) are not tracked: they are the ones the model replaces. Synchronisation inside
// those calls (libfabric's locks) stays visible. Setup calls are not wrapped.
// Native atomic adds (post_atomic_add) are posts like writes (they release the sync object); the
// provider applies a peer's add to our memory inside poll(), untracked, where a consumer may see
// it at once, so before each poll the wrapper acquires the sync object and releases every word of
// the regions adds go to (the ids this process adds into remotely: every rank registers alike;
// small host regions only, as signal counters are), which the consumer's acquire load syncs with.
// The wrapper sits *inside* the chaos transport, so the chaos code stays fully checked and the
// modelled read happens when chaos really posts a held write.
// Outside TSan builds this is transport::make_transport(spec), nothing added.
#pragma once

#include <memory>

#include "transport/factory.h"

namespace anyep::testkit {

// make_transport(spec), with the inner endpoint wrapped as above in a TSan build (chaos, when the
// spec asks for it, wraps the result).
std::unique_ptr<transport::Transport> make_tsan_aware_transport(const transport::TransportSpec& spec);

// True in a build with -fsanitize=thread.
bool tsan_build();

}  // namespace anyep::testkit
