// Negotiation and NIC set-up for the libfabric backend (cold path: throws with context).
#include <cstring>
#include <set>

#include "common/error.h"
#include "common/fabric_providers.h"
#include "transport/libfabric/libfabric_nic.h"

namespace anyep::transport::libfabric {

namespace {
constexpr uint64_t kCaps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SOURCE;
// Every registration mode we can honour; the provider keeps the ones it needs.
constexpr int kMrModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

void check(int rc, const std::string& what) {
  if (rc) throw TransportError("libfabric: " + what + " failed: " + fi_err(rc));
}

fi_info* hints_for(const std::string& provider, bool hmem, bool atomics) {
  fi_info* h = fi_allocinfo();
  if (!h) throw TransportError("libfabric: fi_allocinfo failed");
  // Atomic adds are posted as fetching adds (see post_atomic_add), which read the target word.
  h->caps = kCaps | (hmem ? FI_HMEM : 0) | (atomics ? FI_ATOMIC | FI_READ | FI_REMOTE_READ : 0);
  h->mode = FI_CONTEXT | FI_CONTEXT2;  // we hand every op a context block of fi_context2 size
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = kMrModes | (hmem ? FI_MR_HMEM : 0);
  h->domain_attr->threading = FI_THREAD_DOMAIN;  // one proxy thread owns the endpoint set
  h->domain_attr->av_type = FI_AV_TABLE;         // fi_addr == insertion index == rank
  h->fabric_attr->prov_name = strdup(provider.c_str());
  return h;
}
}  // namespace

std::string fi_err(ssize_t rc) {
  return std::to_string(rc) + " (" + fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)) + ")";
}

bool query_provider(const std::string& provider, bool want_hmem, InfoList& out, std::string* why, bool want_atomics) {
  // What was asked for first, then less of it. Atomics are asked for by a proxy that fails without
  // them (native atomics), so they rank above FI_HMEM, which only saves host staging (shm grants
  // FI_ATOMIC only without FI_HMEM in libfabric 1.17).
  const bool tries[4][2] = {{want_hmem, want_atomics}, {false, want_atomics}, {want_hmem, false}, {false, false}};
  for (int i = 0; i < 4; ++i) {
    const bool hmem = tries[i][0], atomics = tries[i][1];
    bool seen = false;  // the same combination tried before
    for (int j = 0; j < i; ++j) seen = seen || (tries[j][0] == hmem && tries[j][1] == atomics);
    if (seen) continue;
    fi_info* h = hints_for(provider, hmem, atomics);
    fi_info* res = nullptr;
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &res);
    fi_freeinfo(h);
    if (rc == 0 && res) {
      out.head = res;
      out.hmem = hmem;
      out.atomics = atomics;
      return true;
    }
    if (why)
      *why = "libfabric provider '" + provider + "' offers no FI_EP_RDM endpoint with RMA writes and FI_SOURCE here (" +
             fi_err(rc) + ")";
  }
  return false;
}

std::string choose_provider(const std::string& configured) {
  if (!configured.empty()) return configured;
  std::string tried;
  for (const anyep::fabric::Provider& fp : anyep::fabric::kProviders) {
    if (!fp.auto_pick) continue;
    const std::string p(fp.fi_name);
    InfoList l;
    std::string why;
    if (query_provider(p, false, l, &why)) return p;
    tried += "\n  " + why;
  }
  throw Unsupported("libfabric: no usable provider found (name one: LibfabricConfig::provider, ANYEP_FI_PROVIDER):" +
                    tried);
}

std::vector<const fi_info*> pick_domains(const fi_info* head, uint32_t want) {
  std::vector<const fi_info*> distinct;
  std::set<std::string> seen;
  // Two passes: IPv4 entries first so that tcp on `lo` uses 127.0.0.1, then anything else.
  for (int pass = 0; pass < 2; ++pass)
    for (const fi_info* i = head; i; i = i->next) {
      bool v4 = i->addr_format == FI_SOCKADDR_IN;
      if ((pass == 0) != v4) continue;
      std::string d = i->domain_attr->name ? i->domain_attr->name : "";
      if (seen.insert(d).second) distinct.push_back(i);
    }
  if (want == 0) return distinct;
  std::vector<const fi_info*> out;
  for (uint32_t k = 0; k < want; ++k) out.push_back(distinct[k % distinct.size()]);
  return out;
}

Nic::~Nic() {
  // Endpoint first (it references the rest), then MR, CQs, AV, domain, fabric.
  if (ep) fi_close(&ep->fid);
  if (imm_mr) fi_close(&imm_mr->fid);
  if (txcq) fi_close(&txcq->fid);
  if (rxcq) fi_close(&rxcq->fid);
  if (av) fi_close(&av->fid);
  if (domain) fi_close(&domain->fid);
  if (fabric) fi_close(&fabric->fid);
  if (info) fi_freeinfo(info);
}

std::unique_ptr<Nic> open_nic(const fi_info* src_info, uint32_t num_ranks) {
  auto n = std::make_unique<Nic>();
  n->info = fi_dupinfo(src_info);
  fi_info* info = n->info;
  check(fi_fabric(info->fabric_attr, &n->fabric, nullptr), "fi_fabric");
  check(fi_domain(n->fabric, info, &n->domain, nullptr), "fi_domain");
  fi_av_attr av{};
  av.type = FI_AV_TABLE;
  av.count = num_ranks;
  check(fi_av_open(n->domain, &av, &n->av, nullptr), "fi_av_open");
  n->tx_depth = info->tx_attr->size ? info->tx_attr->size : 1024;
  fi_cq_attr cq{};
  cq.format = FI_CQ_FORMAT_DATA;
  cq.wait_obj = FI_WAIT_NONE;  // the proxy spins
  cq.size = n->tx_depth;
  check(fi_cq_open(n->domain, &cq, &n->txcq, nullptr), "fi_cq_open (transmit)");
  // Remote immediates from every peer land here; size it well above one peer's window.
  cq.size = std::max<size_t>(info->rx_attr->size, 16384);
  check(fi_cq_open(n->domain, &cq, &n->rxcq, nullptr), "fi_cq_open (receive)");
  check(fi_endpoint(n->domain, info, &n->ep, nullptr), "fi_endpoint");
  check(fi_ep_bind(n->ep, &n->av->fid, 0), "fi_ep_bind (av)");
  check(fi_ep_bind(n->ep, &n->txcq->fid, FI_TRANSMIT), "fi_ep_bind (transmit cq)");
  check(fi_ep_bind(n->ep, &n->rxcq->fid, FI_RECV), "fi_ep_bind (receive cq)");
  check(fi_enable(n->ep), "fi_enable");
  size_t len = 0;
  fi_getname(&n->ep->fid, nullptr, &len);  // asks for the size (-FI_ETOOSMALL)
  n->addr.resize(len);
  check(fi_getname(&n->ep->fid, n->addr.data(), &len), "fi_getname");
  n->addr.resize(len);
  n->imm_mr = register_on(*n, &n->imm_word, sizeof n->imm_word, MemKind::kHost, 0, &n->imm_key);
  return n;
}

fid_mr* register_on(Nic& nic, void* base, size_t len, MemKind kind, int cuda_device, uint64_t* key) {
  const int mode = nic.info->domain_attr->mr_mode;
  iovec iov{base, len};
  fi_mr_attr a{};
  a.mr_iov = &iov;
  a.iov_count = 1;
  // With atomics the target word is also read (fetching adds: providers check FI_REMOTE_READ).
  a.access = FI_WRITE | FI_REMOTE_WRITE | ((nic.info->caps & FI_ATOMIC) ? FI_READ | FI_REMOTE_READ : 0);
  a.requested_key = (mode & FI_MR_PROV_KEY) ? 0 : nic.next_key++;
  a.iface = kind == MemKind::kCuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
  if (kind == MemKind::kCuda) a.device.cuda = cuda_device;
  fid_mr* mr = nullptr;
  int rc = fi_mr_regattr(nic.domain, &a, 0, &mr);
  if (rc) {
    std::string m = "libfabric (" + std::string(nic.info->fabric_attr->prov_name) + "): registering " +
                    std::to_string(len) + " bytes of " + (kind == MemKind::kCuda ? "CUDA" : "host") +
                    " memory failed: " + fi_err(rc);
    if (kind == MemKind::kCuda && (rc == -FI_ENOSYS || rc == -FI_EOPNOTSUPP))
      throw Unsupported(m + " (this libfabric cannot register GPU memory; use host-staged buffers)");
    throw TransportError(m);
  }
  if (mode & FI_MR_ENDPOINT) {
    // Endpoint-scoped registrations must be bound to the endpoint and enabled before use.
    if (int b = fi_mr_bind(mr, &nic.ep->fid, 0); b || (b = fi_mr_enable(mr))) {
      fi_close(&mr->fid);
      throw TransportError("libfabric: binding a registration to its endpoint failed: " + fi_err(b));
    }
  }
  *key = fi_mr_key(mr);
  if (*key == FI_KEY_NOTAVAIL) {
    fi_close(&mr->fid);
    throw Unsupported("libfabric: provider needs raw (FI_MR_RAW) keys, which anyep does not handle");
  }
  return mr;
}

std::string order_names(uint64_t o) {
  static const std::pair<uint64_t, const char*> names[] = {
      {FI_ORDER_RAR, "RAR"}, {FI_ORDER_RAW, "RAW"}, {FI_ORDER_RAS, "RAS"}, {FI_ORDER_WAR, "WAR"}, {FI_ORDER_WAW, "WAW"},
      {FI_ORDER_WAS, "WAS"}, {FI_ORDER_SAR, "SAR"}, {FI_ORDER_SAW, "SAW"}, {FI_ORDER_SAS, "SAS"}};
  std::string s;
  for (auto& [bit, name] : names)
    if (o & bit) {
      if (!s.empty()) s += "|";
      s += name;
    }
  return s.empty() ? "none" : s;
}

std::string mr_mode_names(int m) {
  static const std::pair<int, const char*> names[] = {{FI_MR_LOCAL, "LOCAL"},
                                                      {FI_MR_RAW, "RAW"},
                                                      {FI_MR_VIRT_ADDR, "VIRT_ADDR"},
                                                      {FI_MR_ALLOCATED, "ALLOCATED"},
                                                      {FI_MR_PROV_KEY, "PROV_KEY"},
                                                      {FI_MR_ENDPOINT, "ENDPOINT"},
                                                      {FI_MR_HMEM, "HMEM"}};
  std::string s;
  for (auto& [bit, name] : names)
    if (m & bit) {
      if (!s.empty()) s += "|";
      s += name;
    }
  return s.empty() ? "none" : s;
}

}  // namespace anyep::transport::libfabric
