// anyep/src/transport/transport.h
//
// The NIC layer: the only interface the proxy sees. A Transport is one endpoint set owned by one
// proxy thread (thread i of every rank talks to thread i of every peer). It knows bytes, memory
// registrations, ranks and 32-bit immediates; never tokens, experts or commands.
//
// Setup calls may throw anyep::Error with context. Hot-path calls (post_*, poll) never throw:
// they return 0, -EAGAIN for backpressure (retry after poll()), or another negative errno with
// last_error() describing it. Bad input (unknown peer, unregistered memory, out-of-bounds write,
// oversized immediate) is rejected with -EINVAL before anything reaches the wire.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anyep::transport {

enum class MemKind : uint8_t { kHost = 0, kCuda = 1 };

// What the provider guarantees; the proxy emulates the rest.
struct Capabilities {
  std::string backend;          // "loopback", "libfabric", "cuda-ipc", "chaos(...)"
  std::string provider;         // libfabric provider name ("tcp", "shm", "efa", ...) or backend
  bool ordered_writes = false;  // writes (and immediates) to one peer land in posting order
  uint32_t imm_bytes = 4;       // size of the immediate delivered with a write (0: none)
  bool native_atomics = false;  // post_atomic_add works (a remote 64-bit add on registered memory)
  // A write's local completion means its bytes are in the target's memory, so an operation posted
  // after that completion (an atomic add that publishes the data) applies after them. Without it a
  // completion only means the source may be reused (see "Semantics every backend keeps").
  bool placed_writes = false;
  bool gpu_memory = false;       // MemKind::kCuda can be registered
  uint64_t max_write_bytes = 0;  // largest single write (larger ones must be split by the caller)
  uint32_t num_nics = 1;         // NICs striped under this endpoint set
  std::string atomics_note;      // why native_atomics is false, in words ("" when true or unknown)
};

using MrId = uint32_t;  // local registration id: 0, 1, 2... in registration order

// A write from local registered memory to a peer's registered memory.
struct WriteDesc {
  uint32_t dst_rank = 0;
  MrId local_mr = 0;
  uint64_t local_offset = 0;
  MrId remote_mr = 0;  // the id the *peer* got when it registered that region
  uint64_t remote_offset = 0;
  uint64_t length = 0;
  bool has_imm = false;
  uint32_t imm = 0;      // delivered to the peer's poll() after the data is in place
  uint64_t context = 0;  // echoed in the local Completion
};

// A remote atomic add: the 64-bit word at `remote_offset` of the peer's registration `remote_mr`
// (8-byte aligned, inside the region) += value, modulo 2^64 (a negative delta in two's complement).
struct AtomicAddDesc {
  uint32_t dst_rank = 0;
  MrId remote_mr = 0;
  uint64_t remote_offset = 0;
  uint64_t value = 0;
  uint64_t context = 0;  // echoed in the local Completion
};

struct Completion {
  uint64_t context;
  int status;  // 0, or a negative errno (the write failed; last_error() says why)
};

struct ImmEvent {
  uint32_t src_rank;  // identified by the transport (address vector / FI_SOURCE), not imm bits
  uint32_t imm;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const Capabilities& capabilities() const = 0;
  virtual uint32_t rank() const = 0;
  virtual uint32_t num_ranks() const = 0;

  // ---- setup (may throw) ----
  virtual MrId register_memory(void* base, size_t length, MemKind kind) = 0;
  virtual std::vector<uint8_t> export_mr(MrId id) const = 0;  // remote descriptor, serializable
  virtual std::vector<uint8_t> local_address() const = 0;     // endpoint address, serializable
  // addresses[r] = local_address() of rank r (this rank's own entry included).
  virtual void connect(const std::vector<std::vector<uint8_t>>& addresses) = 0;
  // Make the peer's registration `remote_id` (exported as `desc`) writable by post_write.
  virtual void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) = 0;

  // ---- hot path (never throws) ----
  virtual int post_write(const WriteDesc& w) = 0;
  // Posts w[0..n) in order until one fails; *posted = how many went out. Returns 0 or that
  // failure's code (-EAGAIN: retry the rest later). Post what you have in batches: a backend may
  // issue a batch much faster than one call per write (libfabric over shm: 0.6-0.75 of the raw
  // rate at 64 B one by one, 1.0 batched; docs/bench/transport.md).
  virtual int post_writes(const WriteDesc* w, size_t n, size_t* posted) {
    for (*posted = 0; *posted < n; ++*posted)
      if (int rc = post_write(w[*posted])) return rc;
    return 0;
  }
  // A remote atomic add (capabilities().native_atomics): atomic with respect to the other atomic
  // adds to that word from any rank, not to plain stores. Its local completion (poll) means the
  // add has been applied at the target. 0, -EAGAIN, -EINVAL (bad peer or region, misaligned or
  // out-of-bounds word; last_error() says which), or -EOPNOTSUPP where the backend has none.
  virtual int post_atomic_add(const AtomicAddDesc& a) {
    (void)a;
    return -EOPNOTSUPP;
  }
  // An immediate with no data.
  virtual int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) = 0;
  // Drains local completions and remote immediate arrivals. Returns 0 or a negative errno.
  virtual int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
                   size_t* n_imms) = 0;
  virtual std::string last_error() const = 0;
};

}  // namespace anyep::transport
