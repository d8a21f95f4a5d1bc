// anyep/src/transport/libfabric/libfabric_nic.h — internal: negotiating with fi_getinfo and
// opening one NIC (fabric, domain, AV, CQs, RDM endpoint). Used by libfabric_transport.cpp only.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace anyep::transport::libfabric {

std::string fi_err(ssize_t rc);  // "-FI_EAGAIN (Resource temporarily unavailable)" style

struct InfoList {
  fi_info* head = nullptr;
  bool hmem = false;     // FI_HMEM was granted
  bool atomics = false;  // FI_ATOMIC was granted
  InfoList() = default;
  InfoList(const InfoList&) = delete;
  InfoList& operator=(const InfoList&) = delete;
  ~InfoList() {
    if (head) fi_freeinfo(head);
  }
};

// fi_getinfo for RDM + RMA writes + FI_SOURCE (+ FI_HMEM, + FI_ATOMIC, each when asked and offered:
// what the provider refuses is dropped, never the endpoint) on `provider`. Returns false with *why
// when the provider offers nothing usable here.
bool query_provider(const std::string& provider, bool want_hmem, InfoList& out, std::string* why,
                    bool want_atomics = false);

// The provider to use: cfg's, else ANYEP_FI_PROVIDER, else the first available default.
std::string choose_provider(const std::string& configured);

// One fi_info per NIC: distinct domains first (IPv4 entries preferred); if `want` exceeds them,
// domains repeat (each repeat is opened separately: an emulated extra NIC).
std::vector<const fi_info*> pick_domains(const fi_info* head, uint32_t want);

struct Nic {
  fi_info* info = nullptr;  // our copy
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* txcq = nullptr;
  fid_cq* rxcq = nullptr;
  fid_ep* ep = nullptr;
  // Target of immediate-only writes (zero bytes land here; only the CQ data matters).
  fid_mr* imm_mr = nullptr;
  uint64_t imm_word = 0;
  uint64_t imm_key = 0;
  std::vector<uint8_t> addr;                    // fi_getname of ep
  std::vector<fi_addr_t> peers;                 // rank -> AV address
  std::unordered_map<fi_addr_t, uint32_t> src;  // AV address -> rank (FI_SOURCE lookup)
  std::vector<uint32_t> src_by_index;           // the same when AV addresses are 0..n-1 (fast path)
  size_t tx_depth = 0;
  uint64_t bytes_in_flight = 0;
  size_t ops_in_flight = 0;
  uint64_t next_key = 1;  // requested keys when the provider does not pick them (no FI_MR_PROV_KEY)

  Nic() = default;
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;
  ~Nic();
};

// Opens fabric, domain, AV (table, num_ranks entries), CQs and the endpoint; registers imm_word.
std::unique_ptr<Nic> open_nic(const fi_info* info, uint32_t num_ranks);

// Registers [base, base+len) for local source use and remote writes on `nic`. *key gets the key
// the peer must use. Throws Unsupported / TransportError with the provider's words.
fid_mr* register_on(Nic& nic, void* base, size_t len, MemKind kind, int cuda_device, uint64_t* key);

// FI_ORDER_* bits as names, for describe().
std::string order_names(uint64_t order);
std::string mr_mode_names(int mode);

}  // namespace anyep::transport::libfabric
