// anyep/emunic/emunic.h — internal: the libfabric objects of the emulated NIC (fabric, domain,
// address vector, completion queue, registration, endpoint) and its engine. provider.cpp fills the
// ops tables; engine.cpp moves the packets.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "env.h"
#include "mover.h"
#include "wire.h"

namespace anyep_emunic {

constexpr uint32_t kProviderVersion = FI_VERSION(1, 0);
constexpr uint32_t kApiVersion = FI_VERSION(1, 17);
constexpr const char* kName = "emunic";

// prov_errno of error completions (fi_cq_strerror names them).
enum ErrCode : uint32_t {
  kErrNone = 0,
  kErrBadKey = 1,       // no registration with that key at the target
  kErrBounds = 2,       // [addr, addr+len) not inside the registration
  kErrAccess = 3,       // the registration lacks the access the operation needs
  kErrPeerLost = 4,     // the target's process or endpoint is gone
  kErrTimeout = 5,      // no ack within ANYEP_EMUNIC_TIMEOUT_MS
  kErrUnknownAddr = 6,  // the destination fi_addr is not in the address vector
  kErrMover = 7,        // the mover failed (atomic type/op, GPU copy)
  kErrAlign = 8,        // an atomic's target is not aligned to its datatype
};
const char* err_text(uint32_t code);

uint64_t now_ns();

struct Domain;
struct Endpoint;

struct Fabric {
  fid_fabric f{};
};

struct Mr {
  fid_mr m{};
  Domain* dom = nullptr;
  uint64_t magic = 0;  // kMrMagic while open (fi_mr_desc points at this object)
  uint8_t* base = nullptr;
  size_t len = 0;
  uint64_t access = 0;
  fi_hmem_iface iface = FI_HMEM_SYSTEM;
  int device = 0;
};
constexpr uint64_t kMrMagic = 0x726d63696e756d65ull;

struct Domain {
  fid_domain d{};
  Fabric* fab = nullptr;
  fi_info* info = nullptr;  // our copy
  uint32_t port = 0;
  uint64_t uid = 0;  // mixed into provider keys
  std::shared_mutex mr_mu;
  std::unordered_map<uint64_t, Mr*> mrs;  // key -> registration
  uint64_t next_key = 1;
  // The registration covering [addr, addr+len) with access `need`, or null and *code why not.
  Mr* check(uint64_t key, uint64_t addr, uint64_t len, uint64_t need, uint32_t* code);
};

struct Av {
  fid_av a{};
  Domain* dom = nullptr;
  std::mutex mu;
  std::vector<std::string> addrs;  // fi_addr -> address string
};

// One completion: what fi_cq_read hands out, plus the source for fi_cq_readfrom.
struct CqEntry {
  fi_cq_data_entry e;
  fi_addr_t src;
};

// A completion queue: engines produce (serialized by prod_mu), the owning thread consumes without
// a lock (acquire on tail). Errors wait in their own queue; while one is there, reads say -FI_EAVAIL.
struct Cq {
  fid_cq c{};
  Domain* dom = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_DATA;
  size_t cap = 0;  // power of two
  std::unique_ptr<CqEntry[]> ring;
  alignas(64) std::atomic<uint64_t> head{0};  // consumer
  alignas(64) std::atomic<uint64_t> tail{0};  // producer
  std::mutex prod_mu;
  std::mutex err_mu;
  std::deque<std::pair<fi_cq_err_entry, std::string>> errs;
  std::atomic<size_t> nerr{0};
  std::string err_text_held;  // err_data of the last error read (valid until the next readerr)
  // False when full (the engine keeps the entry and retries).
  bool push(const CqEntry& e);
  void push_err(const fi_cq_err_entry& e, std::string text);
};

// One posted operation (the send queue's slot). Written by the posting thread, read by the engine
// after the doorbell (release/acquire on sq_tail).
struct alignas(64) TxDesc {  // a cache line boundary per slot: the engine reads one while the next is written
  enum Kind : uint8_t { kWrite = 1, kAtomic = 2 };
  Kind kind;
  uint8_t flags;  // wire::PktFlags
  bool complete;  // raise a local completion
  uint8_t datatype, op;
  uint32_t count;  // atomics: elements
  void* context;
  const uint8_t* buf;
  uint64_t len;
  fi_addr_t dest;
  uint64_t raddr, key, cq_data;
  void* result;                            // fetching atomics: where the old values go
  uint8_t operand[wire::kMaxAtomicBytes];  // atomics: operands, copied at post time
  fi_hmem_iface src_iface;
  int src_device;
};

class Engine;

struct Endpoint {
  fid_ep e{};
  Domain* dom = nullptr;
  fi_info* info = nullptr;
  Av* av = nullptr;
  Cq* txcq = nullptr;
  Cq* rxcq = nullptr;
  uint64_t tx_flags = 0;  // FI_SELECTIVE_COMPLETION from the bind
  bool enabled = false;
  // Own segment (inbound lanes).
  std::string seg_name;  // "/anyep-emunic.<pid>.<n>"
  std::string addr;      // "fi_emunic://<seg_name>" (fi_getname, NUL included when handed out)
  void* seg = nullptr;
  // Send queue: slots[size]; the app writes at sq_tail, the engine reads up to it and retires.
  uint32_t sq_size = 0;
  std::unique_ptr<TxDesc[]> sq;
  uint64_t sq_tail_local = 0;                    // posting thread's copy
  alignas(64) std::atomic<uint64_t> sq_tail{0};  // doorbell
  alignas(64) std::atomic<uint64_t> sq_free{0};  // slots retired by the engine (completions raised)
  uint64_t sq_free_cached = 0;                   // posting thread's copy
  Engine* engine = nullptr;                      // owned: stop_engine
};

// Segments of this process's own endpoints, shared by name with the engines of endpoints of the
// same process that send there: one mapping per segment in a process, so that the ring's
// release/acquire pairs are seen on one address (ThreadSanitizer tracks them by address), and the
// mapping stays until its last user lets go.
void* segment_attach(const std::string& name);         // this process's mapping (+1 user), or null
void segment_add(const std::string& name, void* map);  // the owner's mapping (1 user)
void segment_release(const std::string& name);         // -1 user; the last one unmaps

// Starts/stops the endpoint's engine thread (engine.cpp).
Engine* start_engine(Endpoint* ep);
void stop_engine(Engine* e);  // joins the thread (bounded: it checks its stop flag every pass)
// Bytes a posted write takes on the wire per packet (for describe-style logs and the bench).
uint32_t mtu();

}  // namespace anyep_emunic
