// anyep/src/transport/libfabric/libfabric_transport.h — the NIC backend for EFA, verbs NICs
// (ConnectX, Broadcom), Slingshot (cxi), and tcp / shm for testing.
//
// One endpoint set = one FI_EP_RDM endpoint per NIC (libfabric domain), each with its own
// address vector (FI_AV_TABLE, rank order) and a transmit and a receive CQ. A write is fi_write,
// or fi_writedata when it carries an immediate (the immediate is the remote CQ data); an
// immediate-only write is a zero-byte fi_writedata into a small internal region of the peer. The
// source of an immediate is found by FI_SOURCE (fi_cq_readfrom's address-vector index), never
// from bits in the immediate (providers that cannot report the source, see source_id, carry the rank
// in CQ-data bits above the immediate instead). See docs/transport.md for provider selection and capabilities.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

struct fid_ep;
struct fid_cq;

namespace anyep::transport::libfabric {

// How writes are spread over several NICs of one endpoint set.
enum class Striping : uint8_t {
  kBytes = 0,       // the NIC with the fewest bytes in flight (balances big and small writes)
  kDest = 1,        // NIC = destination rank % NICs (keeps one peer on one NIC)
  kRoundRobin = 2,  // one write per NIC in turn
};

// How a receiver learns the writer's rank.
enum class SourceId : uint8_t {
  kAuto = 0,      // FI_SOURCE, except for ofi_rxm-layered providers whose remote-write completions carry no source
  kFiSource = 1,  // the address-vector index libfabric reports (fi_cq_readfrom)
  kCqData = 2,    // the rank in CQ data bits above the 32-bit immediate (shrinks imm_bytes when CQ data is 4 bytes)
};

// Every field is a plain value: nothing here reads the environment. from_env() fills the fields
// the environment sets (whoever builds the config at the top calls it).
struct LibfabricConfig {
  // Provider name as libfabric spells it (a fi_name of common/fabric_providers.h). Empty: the
  // first available of the table's auto_pick providers, in table order.
  std::string provider;
  // NICs (domains) per endpoint set; 0: every domain the provider lists. More than the machine has
  // opens some domains twice (emulates several NICs; used by tests).
  uint32_t num_nics = 1;
  Striping striping = Striping::kBytes;
  // Cap on the immediate's width in bytes (<= 4). Lets tests emulate a NIC with narrow CQ data.
  uint32_t max_imm_bytes = 4;
  SourceId source_id = SourceId::kAuto;
  // Treat the provider's CQ data as at most this many bytes (< 8 emulates a NIC with 4-byte CQ
  // data, as verbs has; tests use it to exercise the rank-in-the-top-bytes path).
  uint32_t max_cq_data_bytes = 8;
  // Ask for FI_HMEM (GPU memory registration) when the provider offers it.
  bool want_hmem = true;
  // Ask for FI_ATOMIC (post_atomic_add: remote 64-bit adds) when the provider offers it. Off by
  // default so that the default negotiation is unchanged until the proxy uses native atomics.
  bool want_atomics = false;
  // Post every write that carries data with FI_DELIVERY_COMPLETE: its completion then comes only
  // once the bytes are in the target's memory (capabilities().placed_writes), which is what lets the
  // proxy publish them with a native atomic add. Off by default: on shm it sends every small write
  // through the bounce-buffer (SAR) protocol, on tcp;ofi_rxm it waits for the target's ack.
  bool delivery_complete = false;

  // provider from ANYEP_FI_PROVIDER, num_nics from ANYEP_FI_NICS, striping from ANYEP_FI_STRIPING;
  // the rest default. Throws InvalidArgument naming the variable for a bad value.
  static LibfabricConfig from_env();
};

std::unique_ptr<Transport> make_libfabric_transport(uint32_t rank, uint32_t num_ranks, const LibfabricConfig& cfg = {});

// Whether `provider` offers RDM endpoints with RMA and FI_SOURCE on this machine; if not, *why says
// so (tests skip with it).
bool provider_available(const std::string& provider, std::string* why);

// What was negotiated (provider, fabric, domains, mr_mode, msg_order, cq_data_size, atomics,
// HMEM), one line, for logs. Throws InvalidArgument if `t` is not a libfabric transport.
std::string describe(const Transport& t);

// The raw libfabric objects behind NIC `nic`, so a benchmark can post the same writes directly
// (its baseline) on the very same endpoint. Not for the proxy.
struct RawWrite {
  fid_ep* ep;
  fid_cq* txcq;
  fid_cq* rxcq;
  void* local_desc;      // fi_mr_desc of the local region
  uint8_t* local_base;   // the local region's address
  uint64_t dest_addr;    // fi_addr_t of the peer
  uint64_t remote_addr;  // address to pass for remote offset 0 (base or 0, by FI_MR_VIRT_ADDR)
  uint64_t remote_key;
  bool fi_source;         // the transport reads sources with fi_cq_readfrom (else from CQ data)
  uint64_t cq_data_high;  // what the transport ORs above the immediate (the rank, or 0)
};
RawWrite raw_write_handles(Transport& t, uint32_t nic, MrId local, uint32_t peer, MrId remote);

}  // namespace anyep::transport::libfabric
