// The libfabric face of the emulated NIC: fi_prov_ini, fi_getinfo per profile, and the fabric,
// domain, address vector, completion queue, registration and endpoint objects. Every function
// pointer of every ops table is set: what the NIC does not do answers -FI_ENOSYS.
#include <dirent.h>
#include <fcntl.h>
#include <rdma/providers/fi_prov.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "emunic.h"

namespace anyep_emunic {

// ---- utilities ---------------------------------------------------------------------------------

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

const char* err_text(uint32_t code) {
  switch (code) {
    case kErrNone:
      return "no error";
    case kErrBadKey:
      return "no registration with this key at the target";
    case kErrBounds:
      return "target range outside the registration";
    case kErrAccess:
      return "registration lacks the access the operation needs";
    case kErrPeerLost:
      return "peer lost (its process or endpoint is gone)";
    case kErrTimeout:
      return "no acknowledgement within ANYEP_EMUNIC_TIMEOUT_MS";
    case kErrUnknownAddr:
      return "destination not in the address vector";
    case kErrMover:
      return "the data mover failed";
    case kErrAlign:
      return "atomic target not aligned to its datatype";
    default:
      return "unknown emunic error";
  }
}

uint32_t mtu() { return wire::kMtu; }

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: provider keys that do not repeat across domains
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stub for any ops-table slot: -FI_ENOSYS in the slot's return type.
template <class F>
struct Nosys;
template <class R, class... A>
struct Nosys<R (*)(A...)> {
  static R fn(A...) {
    if constexpr (std::is_pointer_v<R>)
      return nullptr;
    else
      return static_cast<R>(-FI_ENOSYS);
  }
};
#define NOSYS(T, m) (&Nosys<decltype(T::m)>::fn)
// Every table below lists every member: a table that grows in a newer header fails to compile
// here instead of leaving a null slot.
#define TABLE_SLOTS(T, n) static_assert(sizeof(T) == sizeof(size_t) + (n) * sizeof(void*), #T " has other slots")

char* dupstr(const char* s) { return s ? strdup(s) : nullptr; }

std::string port_name(uint32_t port) { return std::string(kName) + "_" + std::to_string(port); }

// ---- getinfo -------------------------------------------------------------------------------

constexpr uint64_t kSecondary = FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;

uint64_t offered_caps(Profile p) {
  uint64_t c = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_HMEM | kSecondary;
  // Fetching atomics read the target word: FI_READ/FI_REMOTE_READ come with FI_ATOMIC.
  if (p == Profile::kVerbs) c |= FI_ATOMIC | FI_READ | FI_REMOTE_READ;
  return c;
}
uint64_t offered_order(Profile p) {
  // What verbs reports for RDM over RC queue pairs; efa promises nothing between messages.
  return p == Profile::kVerbs
             ? FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_RAS | FI_ORDER_WAW | FI_ORDER_WAS | FI_ORDER_SAW | FI_ORDER_SAS
             : 0;
}
constexpr size_t kMaxMsg = size_t{1} << 30;
constexpr size_t kRxSize = 1024;

fi_info* make_info(const Config& cfg, uint32_t port, const fi_info* hints) {
  const uint64_t offered = offered_caps(cfg.profile);
  uint64_t caps = offered;
  if (hints && hints->caps) {
    if (hints->caps & ~offered) return nullptr;  // efa + FI_ATOMIC lands here
    caps = (hints->caps & offered) | kSecondary;
    // A GPU mover that applies no atomics: GPU memory and atomics are not offered together (the
    // backend then asks again without one of them).
    Mover* g = (caps & FI_HMEM) && (caps & FI_ATOMIC) ? gpu_mover() : nullptr;
    if (g && g->reaches(FI_HMEM_CUDA) && !g->atomics_on(FI_HMEM_CUDA)) return nullptr;
  }
  uint64_t mode_req = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | (cfg.mr_local ? FI_MR_LOCAL : 0) |
                      ((caps & FI_HMEM) ? FI_MR_HMEM : 0);
  size_t tx_size = cfg.tx_depth;
  fi_threading threading = FI_THREAD_DOMAIN;
  fi_av_type av_type = FI_AV_TABLE;
  const uint64_t order = offered_order(cfg.profile);
  if (hints) {
    if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM) return nullptr;
    if (hints->ep_attr && hints->ep_attr->max_msg_size > kMaxMsg) return nullptr;
    if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_ADDR_STR) return nullptr;
    if (hints->fabric_attr) {
      if (hints->fabric_attr->name && std::strcmp(hints->fabric_attr->name, kName)) return nullptr;
      if (hints->fabric_attr->prov_name && std::strcmp(hints->fabric_attr->prov_name, kName)) return nullptr;
    }
    if (const fi_domain_attr* d = hints->domain_attr) {
      if (d->name && port_name(port) != d->name) return nullptr;
      // The application lists the registration modes it can honour; ours must all be among them
      // (the old FI_MR_BASIC / FI_MR_SCALABLE values and an empty set honour none of them).
      if (d->mr_mode == FI_MR_UNSPEC || d->mr_mode == FI_MR_BASIC || d->mr_mode == FI_MR_SCALABLE) return nullptr;
      const uint64_t honoured = static_cast<uint64_t>(d->mr_mode);
      if (!hints->caps && !(honoured & FI_MR_HMEM)) {  // nothing asked: offer no FI_HMEM rather than fail
        caps &= ~FI_HMEM;
        mode_req &= ~static_cast<uint64_t>(FI_MR_HMEM);
      }
      if (mode_req & ~honoured) return nullptr;
      if (d->cq_data_size > 4) return nullptr;
      if (d->threading == FI_THREAD_COMPLETION || d->threading == FI_THREAD_DOMAIN)
        threading = d->threading;
      else if (d->threading != FI_THREAD_UNSPEC)
        return nullptr;  // posting is lock-free per endpoint: the application serializes
      if (d->av_type == FI_AV_MAP) av_type = FI_AV_MAP;
    }
    if (hints->tx_attr) {
      if (hints->tx_attr->msg_order & ~order) return nullptr;
      if (hints->tx_attr->size > 65536) return nullptr;
      tx_size = std::max(tx_size, hints->tx_attr->size);
      if (hints->tx_attr->inject_size > 0) return nullptr;
    }
    if (hints->rx_attr && (hints->rx_attr->msg_order & ~order)) return nullptr;
  }
  fi_info* i = fi_allocinfo();
  if (!i) return nullptr;
  i->caps = caps;
  i->mode = 0;
  i->addr_format = FI_ADDR_STR;
  i->tx_attr->caps = caps;
  i->tx_attr->op_flags = 0;
  i->tx_attr->msg_order = order;
  i->tx_attr->comp_order = FI_ORDER_NONE;
  i->tx_attr->inject_size = 0;
  i->tx_attr->size = tx_size;
  i->tx_attr->iov_limit = 1;
  i->tx_attr->rma_iov_limit = 1;
  i->rx_attr->caps = caps;
  i->rx_attr->msg_order = order;
  i->rx_attr->comp_order = FI_ORDER_NONE;
  i->rx_attr->size = kRxSize;
  i->rx_attr->iov_limit = 1;
  i->ep_attr->type = FI_EP_RDM;
  i->ep_attr->protocol = FI_PROTO_UNSPEC;
  i->ep_attr->max_msg_size = kMaxMsg;
  i->ep_attr->tx_ctx_cnt = 1;
  i->ep_attr->rx_ctx_cnt = 1;
  i->domain_attr->name = dupstr(port_name(port).c_str());
  i->domain_attr->threading = threading;
  i->domain_attr->control_progress = FI_PROGRESS_AUTO;
  i->domain_attr->data_progress = FI_PROGRESS_AUTO;  // the engine thread
  i->domain_attr->resource_mgmt = FI_RM_ENABLED;
  i->domain_attr->av_type = av_type;
  i->domain_attr->mr_mode = static_cast<int>(mode_req);
  i->domain_attr->mr_key_size = 8;
  i->domain_attr->cq_data_size = 4;
  i->domain_attr->cq_cnt = 1024;
  i->domain_attr->ep_cnt = 1024;
  i->domain_attr->tx_ctx_cnt = 1;
  i->domain_attr->rx_ctx_cnt = 1;
  i->domain_attr->max_ep_tx_ctx = 1;
  i->domain_attr->max_ep_rx_ctx = 1;
  i->domain_attr->mr_iov_limit = 1;
  i->domain_attr->caps = caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
  i->domain_attr->mr_cnt = 1 << 16;
  i->fabric_attr->name = dupstr(kName);
  // prov_name stays empty: libfabric fills in the provider's name (setting it makes "emunic;emunic").
  i->fabric_attr->prov_version = kProviderVersion;
  i->fabric_attr->api_version = kApiVersion;
  return i;
}

int getinfo(uint32_t version, const char*, const char*, uint64_t, const fi_info* hints, fi_info** info) {
  const Config& cfg = config();
  *info = nullptr;
  if (!cfg.error.empty() || version < FI_VERSION(1, 5)) return -FI_ENODATA;
  fi_info* tail = nullptr;
  for (uint32_t p = 0; p < cfg.ports; ++p) {
    fi_info* i = make_info(cfg, p, hints);
    if (!i) continue;
    (tail ? tail->next : *info) = i;
    tail = i;
  }
  return *info ? 0 : -FI_ENODATA;
}

// ---- fabric, domain ------------------------------------------------------------------------

int fabric_close(fid* f) {
  delete reinterpret_cast<Fabric*>(f);
  return 0;
}
fi_ops fabric_fid_ops = {sizeof(fi_ops),          fabric_close,         NOSYS(fi_ops, bind),   NOSYS(fi_ops, control),
                         NOSYS(fi_ops, ops_open), NOSYS(fi_ops, tostr), NOSYS(fi_ops, ops_set)};
TABLE_SLOTS(fi_ops, 6);

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context);
int domain_open2(fid_fabric* fabric, fi_info* info, fid_domain** dom, uint64_t flags, void* context) {
  if (flags) return -FI_ENOSYS;
  return domain_open(fabric, info, dom, context);
}
fi_ops_fabric fabric_ops = {sizeof(fi_ops_fabric),
                            domain_open,
                            NOSYS(fi_ops_fabric, passive_ep),
                            NOSYS(fi_ops_fabric, eq_open),
                            NOSYS(fi_ops_fabric, wait_open),
                            NOSYS(fi_ops_fabric, trywait),
                            domain_open2};
TABLE_SLOTS(fi_ops_fabric, 6);

int fabric_open(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (!config().error.empty()) return -FI_EINVAL;
  if (attr && attr->name && std::strcmp(attr->name, kName)) return -FI_ENODATA;
  auto* f = new (std::nothrow) Fabric;
  if (!f) return -FI_ENOMEM;
  f->f.fid.fclass = FI_CLASS_FABRIC;
  f->f.fid.context = context;
  f->f.fid.ops = &fabric_fid_ops;
  f->f.ops = &fabric_ops;
  *fabric = &f->f;
  return 0;
}

int domain_close(fid* f) {
  auto* d = reinterpret_cast<Domain*>(f);
  {
    std::unique_lock lk(d->mr_mu);
    if (!d->mrs.empty()) return -FI_EBUSY;
  }
  fi_freeinfo(d->info);
  delete d;
  return 0;
}
fi_ops domain_fid_ops = {sizeof(fi_ops),          domain_close,         NOSYS(fi_ops, bind),   NOSYS(fi_ops, control),
                         NOSYS(fi_ops, ops_open), NOSYS(fi_ops, tostr), NOSYS(fi_ops, ops_set)};

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);
int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context);
int ep_open(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
int ep_open2(fid_domain* domain, fi_info* info, fid_ep** ep, uint64_t flags, void* context) {
  if (flags) return -FI_ENOSYS;
  return ep_open(domain, info, ep, context);
}

int query_atomic(fid_domain* domain, fi_datatype datatype, fi_op op, fi_atomic_attr* attr, uint64_t flags) {
  auto* d = reinterpret_cast<Domain*>(domain);
  if (!(d->info->caps & FI_ATOMIC)) return -FI_EOPNOTSUPP;
  if (flags & FI_COMPARE_ATOMIC) return -FI_EOPNOTSUPP;
  if (!host_atomic_supported(datatype, op)) return -FI_EOPNOTSUPP;
  if (op == FI_ATOMIC_READ && !(flags & FI_FETCH_ATOMIC)) return -FI_EOPNOTSUPP;
  attr->size = datatype_size(datatype);
  attr->count = wire::kMaxAtomicBytes / attr->size;
  return 0;
}

fi_ops_domain domain_ops = {sizeof(fi_ops_domain),
                            av_open,
                            cq_open,
                            ep_open,
                            NOSYS(fi_ops_domain, scalable_ep),
                            NOSYS(fi_ops_domain, cntr_open),
                            NOSYS(fi_ops_domain, poll_open),
                            NOSYS(fi_ops_domain, stx_ctx),
                            NOSYS(fi_ops_domain, srx_ctx),
                            query_atomic,
                            NOSYS(fi_ops_domain, query_collective),
                            ep_open2};
TABLE_SLOTS(fi_ops_domain, 11);

// ---- registrations -------------------------------------------------------------------------

int mr_close(fid* f) {
  auto* m = reinterpret_cast<Mr*>(f);
  {
    std::unique_lock lk(m->dom->mr_mu);
    m->dom->mrs.erase(m->m.key);
  }
  m->magic = 0;
  delete m;
  return 0;
}
int mr_bind(fid*, fid*, uint64_t) { return 0; }  // no FI_MR_ENDPOINT: a registration serves the whole domain
int mr_control(fid*, int command, void*) { return command == FI_ENABLE ? 0 : -FI_ENOSYS; }
fi_ops mr_fid_ops = {
    sizeof(fi_ops),        mr_close, mr_bind, mr_control, NOSYS(fi_ops, ops_open), NOSYS(fi_ops, tostr),
    NOSYS(fi_ops, ops_set)};

int mr_regattr(fid* fid, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr) {
  auto* d = reinterpret_cast<Domain*>(fid);
  if (!attr || attr->iov_count != 1 || !attr->mr_iov || flags) return -FI_EINVAL;
  if (attr->iface != FI_HMEM_SYSTEM) {
    // GPU memory needs a mover that reaches it (the GPU mover); without one the application falls
    // back to host staging, as with a libfabric built without CUDA.
    Mover* g = gpu_mover();
    if (!(d->info->caps & FI_HMEM) || !g || !g->reaches(attr->iface)) return -FI_ENOSYS;
    const int dev = attr->iface == FI_HMEM_CUDA ? attr->device.cuda : 0;
    if (int rc = g->check_region(attr->iface, attr->mr_iov[0].iov_base, attr->mr_iov[0].iov_len, dev)) return rc;
  }
  auto* m = new (std::nothrow) Mr;
  if (!m) return -FI_ENOMEM;
  m->dom = d;
  m->magic = kMrMagic;
  m->base = static_cast<uint8_t*>(attr->mr_iov[0].iov_base);
  m->len = attr->mr_iov[0].iov_len;
  m->access = attr->access ? attr->access : (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
  m->iface = attr->iface;
  m->device = attr->iface == FI_HMEM_CUDA ? attr->device.cuda : 0;
  m->m.fid.fclass = FI_CLASS_MR;
  m->m.fid.context = attr->context;
  m->m.fid.ops = &mr_fid_ops;
  m->m.mem_desc = m;
  {
    std::unique_lock lk(d->mr_mu);
    do m->m.key = mix(d->uid ^ d->next_key++);
    while (m->m.key == FI_KEY_NOTAVAIL || d->mrs.count(m->m.key));
    d->mrs[m->m.key] = m;
  }
  *mr = &m->m;
  return 0;
}
int mr_regv(fid* fid, const iovec* iov, size_t count, uint64_t access, uint64_t offset, uint64_t requested_key,
            uint64_t flags, fid_mr** mr, void* context) {
  fi_mr_attr a{};
  a.mr_iov = iov;
  a.iov_count = count;
  a.access = access;
  a.offset = offset;
  a.requested_key = requested_key;
  a.context = context;
  return mr_regattr(fid, &a, flags, mr);
}
int mr_reg(fid* fid, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key,
           uint64_t flags, fid_mr** mr, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return mr_regv(fid, &iov, 1, access, offset, requested_key, flags, mr, context);
}
fi_ops_mr mr_ops = {sizeof(fi_ops_mr), mr_reg, mr_regv, mr_regattr};
TABLE_SLOTS(fi_ops_mr, 3);

int domain_open(fid_fabric* fabric, fi_info* info, fid_domain** dom, void* context) {
  if (!info || !info->domain_attr || !info->domain_attr->name) return -FI_EINVAL;
  const std::string name = info->domain_attr->name;
  const std::string prefix = std::string(kName) + "_";
  if (name.compare(0, prefix.size(), prefix)) return -FI_ENODATA;
  auto* d = new (std::nothrow) Domain;
  if (!d) return -FI_ENOMEM;
  static std::atomic<uint64_t> domains{0};
  d->fab = reinterpret_cast<Fabric*>(fabric);
  d->info = fi_dupinfo(info);
  d->port = static_cast<uint32_t>(std::strtoul(name.c_str() + prefix.size(), nullptr, 10));
  d->uid = mix(now_ns() ^ (static_cast<uint64_t>(getpid()) << 32) ^ domains.fetch_add(1));
  d->d.fid.fclass = FI_CLASS_DOMAIN;
  d->d.fid.context = context;
  d->d.fid.ops = &domain_fid_ops;
  d->d.ops = &domain_ops;
  d->d.mr = &mr_ops;
  *dom = &d->d;
  return 0;
}

// ---- address vector ------------------------------------------------------------------------

int av_close(fid* f) {
  delete reinterpret_cast<Av*>(f);
  return 0;
}
fi_ops av_fid_ops = {sizeof(fi_ops),          av_close,
                     NOSYS(fi_ops, bind),     NOSYS(fi_ops, control),
                     NOSYS(fi_ops, ops_open), NOSYS(fi_ops, tostr),
                     NOSYS(fi_ops, ops_set)};

bool valid_addr(const char* s, size_t max) {
  const size_t n = strnlen(s, max);
  return n < max && n < wire::kAddrBytes && !std::strncmp(s, "fi_emunic:///", 13);
}

int av_insert(fid_av* av, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags, void*) {
  auto* a = reinterpret_cast<Av*>(av);
  if (flags) return -FI_EINVAL;
  const char* p = static_cast<const char*>(addr);
  int done = 0;
  std::lock_guard lk(a->mu);
  for (size_t k = 0; k < count; ++k) {
    // FI_ADDR_STR: NUL-terminated strings back to back.
    if (!valid_addr(p, wire::kAddrBytes)) {
      if (fi_addr) fi_addr[k] = FI_ADDR_NOTAVAIL;
      p += strnlen(p, wire::kAddrBytes) + 1;
      continue;
    }
    a->addrs.emplace_back(p);
    if (fi_addr) fi_addr[k] = a->addrs.size() - 1;
    p += std::strlen(p) + 1;
    ++done;
  }
  return done;
}
int av_lookup(fid_av* av, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
  auto* a = reinterpret_cast<Av*>(av);
  std::lock_guard lk(a->mu);
  if (fi_addr >= a->addrs.size()) return -FI_EINVAL;
  const std::string& s = a->addrs[fi_addr];
  const size_t need = s.size() + 1;
  std::memcpy(addr, s.c_str(), std::min(*addrlen, need));
  const bool fits = *addrlen >= need;
  *addrlen = need;
  return fits ? 0 : -FI_ETOOSMALL;
}
const char* av_straddr(fid_av*, const void* addr, char* buf, size_t* len) {
  const char* s = static_cast<const char*>(addr);
  const size_t need = strnlen(s, wire::kAddrBytes) + 1;
  if (buf && *len) {
    std::memcpy(buf, s, std::min(*len, need) - 1);
    buf[std::min(*len, need) - 1] = 0;
  }
  *len = need;
  return buf;
}
fi_ops_av av_ops = {
    sizeof(fi_ops_av), av_insert,  NOSYS(fi_ops_av, insertsvc), NOSYS(fi_ops_av, insertsym), NOSYS(fi_ops_av, remove),
    av_lookup,         av_straddr, NOSYS(fi_ops_av, av_set)};
TABLE_SLOTS(fi_ops_av, 7);

int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context) {
  if (attr && attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE && attr->type != FI_AV_MAP) return -FI_EINVAL;
  auto* a = new (std::nothrow) Av;
  if (!a) return -FI_ENOMEM;
  a->dom = reinterpret_cast<Domain*>(domain);
  if (attr && attr->count) a->addrs.reserve(attr->count);
  a->a.fid.fclass = FI_CLASS_AV;
  a->a.fid.context = context;
  a->a.fid.ops = &av_fid_ops;
  a->a.ops = &av_ops;
  *av = &a->a;
  return 0;
}

// ---- completion queue ----------------------------------------------------------------------

int cq_close(fid* f) {
  delete reinterpret_cast<Cq*>(f);
  return 0;
}
fi_ops cq_fid_ops = {sizeof(fi_ops),          cq_close,
                     NOSYS(fi_ops, bind),     NOSYS(fi_ops, control),
                     NOSYS(fi_ops, ops_open), NOSYS(fi_ops, tostr),
                     NOSYS(fi_ops, ops_set)};

size_t entry_size(fi_cq_format f) {
  switch (f) {
    case FI_CQ_FORMAT_CONTEXT:
      return sizeof(fi_cq_entry);
    case FI_CQ_FORMAT_MSG:
      return sizeof(fi_cq_msg_entry);
    default:
      return sizeof(fi_cq_data_entry);
  }
}

ssize_t cq_readfrom(fid_cq* cq, void* buf, size_t count, fi_addr_t* src) {
  auto* c = reinterpret_cast<Cq*>(cq);
  if (c->nerr.load(std::memory_order_acquire)) return -FI_EAVAIL;
  const uint64_t h = c->head.load(std::memory_order_relaxed);
  const uint64_t t = c->tail.load(std::memory_order_acquire);
  const size_t n = std::min<uint64_t>(count, t - h);
  if (!n) return -FI_EAGAIN;
  const size_t es = entry_size(c->format);
  auto* out = static_cast<uint8_t*>(buf);
  for (size_t k = 0; k < n; ++k) {
    const CqEntry& e = c->ring[(h + k) & (c->cap - 1)];
    std::memcpy(out + k * es, &e.e, es);  // the formats share their leading fields
    if (src) src[k] = e.src;
  }
  c->head.store(h + n, std::memory_order_release);
  return static_cast<ssize_t>(n);
}
ssize_t cq_read(fid_cq* cq, void* buf, size_t count) { return cq_readfrom(cq, buf, count, nullptr); }

ssize_t cq_readerr(fid_cq* cq, fi_cq_err_entry* buf, uint64_t) {
  auto* c = reinterpret_cast<Cq*>(cq);
  std::lock_guard lk(c->err_mu);
  if (c->errs.empty()) return -FI_EAGAIN;
  auto [e, text] = std::move(c->errs.front());
  c->errs.pop_front();
  c->nerr.fetch_sub(1, std::memory_order_release);
  c->err_text_held = std::move(text);
  void* user_data = buf->err_data;
  const size_t user_size = buf->err_data_size;
  *buf = e;
  if (user_size && user_data) {
    // The application brought its own buffer for the error data.
    const size_t n = std::min(user_size, c->err_text_held.size() + 1);
    std::memcpy(user_data, c->err_text_held.c_str(), n);
    static_cast<char*>(user_data)[n - 1] = 0;
    buf->err_data = user_data;
    buf->err_data_size = n;
  } else {
    buf->err_data = c->err_text_held.data();
    buf->err_data_size = c->err_text_held.size() + 1;
  }
  return 1;
}

const char* cq_strerror(fid_cq*, int prov_errno, const void* err_data, char* buf, size_t len) {
  thread_local char own[256];
  if (!buf || !len) {
    buf = own;
    len = sizeof own;
  }
  std::snprintf(buf, len, "emunic: %s%s%s", err_text(static_cast<uint32_t>(prov_errno)), err_data ? ": " : "",
                err_data ? static_cast<const char*>(err_data) : "");
  return buf;
}

fi_ops_cq cq_ops = {
    sizeof(fi_ops_cq),        cq_read,    cq_readfrom, cq_readerr, NOSYS(fi_ops_cq, sread), NOSYS(fi_ops_cq, sreadfrom),
    NOSYS(fi_ops_cq, signal), cq_strerror};
TABLE_SLOTS(fi_ops_cq, 7);

int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** cq, void* context) {
  if (!attr) return -FI_EINVAL;
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS;  // no sread
  if (attr->format == FI_CQ_FORMAT_TAGGED) return -FI_ENOSYS;
  auto* c = new (std::nothrow) Cq;
  if (!c) return -FI_ENOMEM;
  c->dom = reinterpret_cast<Domain*>(domain);
  c->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_DATA : attr->format;
  size_t want = std::max<size_t>(attr->size, 1024);
  c->cap = 1;
  while (c->cap < want) c->cap <<= 1;
  c->ring.reset(new (std::nothrow) CqEntry[c->cap]);
  if (!c->ring) {
    delete c;
    return -FI_ENOMEM;
  }
  c->c.fid.fclass = FI_CLASS_CQ;
  c->c.fid.context = context;
  c->c.fid.ops = &cq_fid_ops;
  c->c.ops = &cq_ops;
  *cq = &c->c;
  return 0;
}

// ---- endpoint ------------------------------------------------------------------------------

// Segments of processes that died without closing (a killed test rank) are removed once per
// process, when its first endpoint is made: their names carry the owner's pid.
void remove_stale_segments() {
  static std::once_flag once;
  std::call_once(once, [] {
    DIR* d = opendir("/dev/shm");
    if (!d) return;
    while (dirent* e = readdir(d)) {
      unsigned pid = 0;
      if (std::sscanf(e->d_name, "anyep-emunic.%u.", &pid) != 1 || pid == 0) continue;
      if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      shm_unlink((std::string("/") + e->d_name).c_str());
    }
    closedir(d);
  });
}

int create_segment(Endpoint* ep) {
  remove_stale_segments();
  static std::atomic<uint64_t> count{0};
  ep->seg_name = "/anyep-emunic." + std::to_string(getpid()) + "." + std::to_string(count.fetch_add(1)) + "." +
                 std::to_string(ep->dom->port);
  int fd = shm_open(ep->seg_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return -errno;
  if (ftruncate(fd, static_cast<off_t>(wire::segment_bytes())) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(ep->seg_name.c_str());
    return -e;
  }
  void* p = mmap(nullptr, wire::segment_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(ep->seg_name.c_str());
    return -FI_ENOMEM;
  }
  ep->seg = p;
  note_host_mapped(p, wire::segment_bytes());  // packets land there: the GPU mover reads them
  wire::SegHdr* h = wire::seg_hdr(p);
  h->version = wire::kVersion;
  h->pid = static_cast<uint32_t>(getpid());
  h->closed.store(0);
  h->lanes_used.store(0);
  h->heartbeat_ns.store(now_ns());
  __atomic_store_n(&h->magic, wire::kSegMagic, __ATOMIC_RELEASE);
  ep->addr = "fi_emunic://" + ep->seg_name;
  segment_add(ep->seg_name, p);
  return 0;
}

int ep_close(fid* f) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  stop_engine(ep->engine);
  ep->engine = nullptr;
  if (ep->seg) {
    wire::seg_hdr(ep->seg)->closed.store(1, std::memory_order_release);
    shm_unlink(ep->seg_name.c_str());
    segment_release(ep->seg_name);  // unmapped once no engine of this process sends there
  }
  fi_freeinfo(ep->info);
  delete ep;
  return 0;
}
int ep_bind(fid* f, fid* bfid, uint64_t flags) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  if (ep->enabled) return -FI_EOPBADSTATE;
  switch (bfid->fclass) {
    case FI_CLASS_AV:
      ep->av = reinterpret_cast<Av*>(bfid);
      return 0;
    case FI_CLASS_CQ:
      if (flags & FI_TRANSMIT) {
        ep->txcq = reinterpret_cast<Cq*>(bfid);
        ep->tx_flags = flags & FI_SELECTIVE_COMPLETION;
      }
      if (flags & FI_RECV) ep->rxcq = reinterpret_cast<Cq*>(bfid);
      return (flags & (FI_TRANSMIT | FI_RECV)) ? 0 : -FI_EINVAL;
    default:
      return -FI_ENOSYS;
  }
}
int ep_control(fid* f, int command, void*) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  if (command != FI_ENABLE) return -FI_ENOSYS;
  if (ep->enabled) return 0;
  if (!ep->av || !ep->txcq) return -FI_ENOCQ;
  ep->engine = start_engine(ep);
  if (!ep->engine) return -FI_ENOMEM;
  ep->enabled = true;
  return 0;
}
fi_ops ep_fid_ops = {
    sizeof(fi_ops),        ep_close, ep_bind, ep_control, NOSYS(fi_ops, ops_open), NOSYS(fi_ops, tostr),
    NOSYS(fi_ops, ops_set)};

fi_ops_ep ep_ops = {
    sizeof(fi_ops_ep),        NOSYS(fi_ops_ep, cancel), NOSYS(fi_ops_ep, getopt),       NOSYS(fi_ops_ep, setopt),
    NOSYS(fi_ops_ep, tx_ctx), NOSYS(fi_ops_ep, rx_ctx), NOSYS(fi_ops_ep, rx_size_left), NOSYS(fi_ops_ep, tx_size_left)};
TABLE_SLOTS(fi_ops_ep, 7);

int ep_getname(fid_t f, void* addr, size_t* addrlen) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  const size_t need = ep->addr.size() + 1;
  if (!addr || *addrlen < need) {
    *addrlen = need;
    return -FI_ETOOSMALL;
  }
  std::memcpy(addr, ep->addr.c_str(), need);
  *addrlen = need;
  return 0;
}
fi_ops_cm cm_ops = {sizeof(fi_ops_cm),         NOSYS(fi_ops_cm, setname), ep_getname,
                    NOSYS(fi_ops_cm, getpeer), NOSYS(fi_ops_cm, connect), NOSYS(fi_ops_cm, listen),
                    NOSYS(fi_ops_cm, accept),  NOSYS(fi_ops_cm, reject),  NOSYS(fi_ops_cm, shutdown),
                    NOSYS(fi_ops_cm, join)};
TABLE_SLOTS(fi_ops_cm, 9);

fi_ops_msg msg_ops = {sizeof(fi_ops_msg),           NOSYS(fi_ops_msg, recv),   NOSYS(fi_ops_msg, recvv),
                      NOSYS(fi_ops_msg, recvmsg),   NOSYS(fi_ops_msg, send),   NOSYS(fi_ops_msg, sendv),
                      NOSYS(fi_ops_msg, sendmsg),   NOSYS(fi_ops_msg, inject), NOSYS(fi_ops_msg, senddata),
                      NOSYS(fi_ops_msg, injectdata)};
TABLE_SLOTS(fi_ops_msg, 9);

fi_ops_tagged tagged_ops = {sizeof(fi_ops_tagged),          NOSYS(fi_ops_tagged, recv),
                            NOSYS(fi_ops_tagged, recvv),    NOSYS(fi_ops_tagged, recvmsg),
                            NOSYS(fi_ops_tagged, send),     NOSYS(fi_ops_tagged, sendv),
                            NOSYS(fi_ops_tagged, sendmsg),  NOSYS(fi_ops_tagged, inject),
                            NOSYS(fi_ops_tagged, senddata), NOSYS(fi_ops_tagged, injectdata)};
TABLE_SLOTS(fi_ops_tagged, 9);

fi_ops_collective coll_ops = {sizeof(fi_ops_collective),
                              NOSYS(fi_ops_collective, barrier),
                              NOSYS(fi_ops_collective, broadcast),
                              NOSYS(fi_ops_collective, alltoall),
                              NOSYS(fi_ops_collective, allreduce),
                              NOSYS(fi_ops_collective, allgather),
                              NOSYS(fi_ops_collective, reduce_scatter),
                              NOSYS(fi_ops_collective, reduce),
                              NOSYS(fi_ops_collective, scatter),
                              NOSYS(fi_ops_collective, gather),
                              NOSYS(fi_ops_collective, msg),
                              NOSYS(fi_ops_collective, barrier2)};
TABLE_SLOTS(fi_ops_collective, 11);

// ---- posting (the hot path: a descriptor and a doorbell, no system call) --------------------

inline void spin_ns(uint32_t ns) {
  if (!ns) return;
  const uint64_t until = now_ns() + ns;
  while (now_ns() < until) {
  }
}

// A free send-queue slot, or null when tx_attr->size operations are outstanding.
inline TxDesc* sq_slot(Endpoint* ep) {
  const uint64_t t = ep->sq_tail_local;
  if (t - ep->sq_free_cached >= ep->sq_size) {
    ep->sq_free_cached = ep->sq_free.load(std::memory_order_acquire);
    if (t - ep->sq_free_cached >= ep->sq_size) return nullptr;
  }
  return &ep->sq[t % ep->sq_size];
}
inline void ring_doorbell(Endpoint* ep) {
  ep->sq_tail.store(++ep->sq_tail_local, std::memory_order_release);
  spin_ns(config().post_ns);
}

// With FI_MR_LOCAL the source must lie in a registration of this domain (its descriptor).
inline bool local_ok(Endpoint* ep, const void* buf, size_t len, void* desc, fi_hmem_iface* iface, int* dev) {
  *iface = FI_HMEM_SYSTEM;
  *dev = 0;
  auto* m = static_cast<Mr*>(desc);
  if (!m) return !len || !(ep->info->domain_attr->mr_mode & FI_MR_LOCAL);
  if (m->magic != kMrMagic || m->dom != ep->dom) return false;
  const auto* b = static_cast<const uint8_t*>(buf);
  if (len && (b < m->base || b + len > m->base + m->len)) return false;
  *iface = m->iface;
  *dev = m->device;
  return true;
}

inline bool wants_completion(const Endpoint* ep, uint64_t flags) {
  return !(ep->tx_flags & FI_SELECTIVE_COMPLETION) || (flags & FI_COMPLETION);
}

ssize_t post_write(fid_ep* e, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest, uint64_t addr,
                   uint64_t key, void* context, uint64_t flags) {
  auto* ep = reinterpret_cast<Endpoint*>(e);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (len > kMaxMsg || (flags & FI_INJECT && len)) return -FI_EINVAL;
  fi_hmem_iface iface;
  int dev;
  if (!local_ok(ep, buf, len, desc, &iface, &dev)) return -FI_EINVAL;
  TxDesc* d = sq_slot(ep);
  if (!d) return -FI_EAGAIN;
  d->kind = TxDesc::kWrite;
  d->flags = (flags & FI_REMOTE_CQ_DATA) ? wire::kCqData : 0;
  d->complete = wants_completion(ep, flags);
  d->context = context;
  d->buf = static_cast<const uint8_t*>(buf);
  d->len = len;
  d->dest = dest;
  d->raddr = addr;
  d->key = key;
  d->cq_data = data & 0xffffffffull;  // cq_data_size is 4
  d->result = nullptr;
  d->src_iface = iface;
  d->src_device = dev;
  ring_doorbell(ep);
  return 0;
}

ssize_t rma_write(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                  void* context) {
  return post_write(ep, buf, len, desc, 0, dest, addr, key, context, 0);
}
ssize_t rma_writedata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest, uint64_t addr,
                      uint64_t key, void* context) {
  return post_write(ep, buf, len, desc, data, dest, addr, key, context, FI_REMOTE_CQ_DATA);
}
ssize_t rma_writev(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
                   void* context) {
  if (count != 1) return -FI_EINVAL;
  return post_write(ep, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, 0, dest, addr, key, context, 0);
}
ssize_t rma_writemsg(fid_ep* ep, const fi_msg_rma* m, uint64_t flags) {
  if (!m || m->iov_count > 1 || m->rma_iov_count != 1) return -FI_EINVAL;
  const void* buf = m->iov_count ? m->msg_iov[0].iov_base : nullptr;
  const size_t len = m->iov_count ? m->msg_iov[0].iov_len : 0;
  if (m->rma_iov[0].len != len) return -FI_EINVAL;
  return post_write(ep, buf, len, m->desc ? m->desc[0] : nullptr, m->data, m->addr, m->rma_iov[0].addr,
                    m->rma_iov[0].key, m->context, flags);
}

fi_ops_rma rma_ops = {sizeof(fi_ops_rma),
                      NOSYS(fi_ops_rma, read),
                      NOSYS(fi_ops_rma, readv),
                      NOSYS(fi_ops_rma, readmsg),
                      rma_write,
                      rma_writev,
                      rma_writemsg,
                      NOSYS(fi_ops_rma, inject),
                      rma_writedata,
                      NOSYS(fi_ops_rma, injectdata)};
TABLE_SLOTS(fi_ops_rma, 9);

ssize_t post_atomic(fid_ep* e, const fi_msg_atomic* m, fi_ioc* result, void** result_desc, size_t result_count,
                    uint64_t flags) {
  auto* ep = reinterpret_cast<Endpoint*>(e);
  if (!ep->enabled) return -FI_EOPBADSTATE;
  if (!m || m->iov_count != 1 || m->rma_iov_count != 1) return -FI_EINVAL;
  const size_t sz = datatype_size(m->datatype);
  const size_t count = m->msg_iov[0].count;
  const bool fetching = result != nullptr;
  if (!host_atomic_supported(m->datatype, m->op) || (m->op == FI_ATOMIC_READ && !fetching)) return -FI_EOPNOTSUPP;
  if (!count || count * sz > wire::kMaxAtomicBytes || m->rma_iov[0].count != count) return -FI_EINVAL;
  if (fetching && (result_count != 1 || result[0].count != count || !result[0].addr)) return -FI_EINVAL;
  if (m->op != FI_ATOMIC_READ && !m->msg_iov[0].addr) return -FI_EINVAL;
  (void)result_desc;  // results go to host memory (MoveDesc::result)
  TxDesc* d = sq_slot(ep);
  if (!d) return -FI_EAGAIN;
  d->kind = TxDesc::kAtomic;
  d->flags = fetching ? wire::kFetching : 0;
  d->complete = wants_completion(ep, flags);
  d->datatype = static_cast<uint8_t>(m->datatype);
  d->op = static_cast<uint8_t>(m->op);
  d->count = static_cast<uint32_t>(count);
  d->context = m->context;
  d->buf = nullptr;
  d->len = count * sz;
  d->dest = m->addr;
  d->raddr = m->rma_iov[0].addr;
  d->key = m->rma_iov[0].key;
  d->cq_data = 0;
  d->result = fetching ? result[0].addr : nullptr;
  // Operands are copied now: the caller may reuse its buffer once the post returns.
  if (m->op != FI_ATOMIC_READ)
    std::memcpy(d->operand, m->msg_iov[0].addr, count * sz);
  else
    std::memset(d->operand, 0, sizeof d->operand);
  d->src_iface = FI_HMEM_SYSTEM;
  d->src_device = 0;
  ring_doorbell(ep);
  return 0;
}

fi_msg_atomic one_atomic(fi_ioc* ioc, fi_rma_ioc* rioc, void** desc, fi_addr_t dest, fi_datatype dt, fi_op op,
                         void* context) {
  fi_msg_atomic m{};
  m.msg_iov = ioc;
  m.desc = desc;
  m.iov_count = 1;
  m.addr = dest;
  m.rma_iov = rioc;
  m.rma_iov_count = 1;
  m.datatype = dt;
  m.op = op;
  m.context = context;
  return m;
}
ssize_t atomic_write(fid_ep* ep, const void* buf, size_t count, void* desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                     fi_datatype dt, fi_op op, void* context) {
  fi_ioc ioc{const_cast<void*>(buf), count};
  fi_rma_ioc rioc{addr, count, key};
  fi_msg_atomic m = one_atomic(&ioc, &rioc, &desc, dest, dt, op, context);
  return post_atomic(ep, &m, nullptr, nullptr, 0, 0);
}
ssize_t atomic_writemsg(fid_ep* ep, const fi_msg_atomic* m, uint64_t flags) {
  return post_atomic(ep, m, nullptr, nullptr, 0, flags);
}
ssize_t atomic_readwrite(fid_ep* ep, const void* buf, size_t count, void* desc, void* result, void* result_desc,
                         fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* context) {
  fi_ioc ioc{const_cast<void*>(buf), count};
  fi_rma_ioc rioc{addr, count, key};
  fi_ioc res{result, count};
  fi_msg_atomic m = one_atomic(&ioc, &rioc, &desc, dest, dt, op, context);
  return post_atomic(ep, &m, &res, &result_desc, 1, 0);
}
ssize_t atomic_readwritemsg(fid_ep* ep, const fi_msg_atomic* m, fi_ioc* resultv, void** result_desc,
                            size_t result_count, uint64_t flags) {
  if (!resultv || !result_count) return -FI_EINVAL;
  return post_atomic(ep, m, resultv, result_desc, result_count, flags);
}
int atomic_valid(fid_ep* e, fi_datatype dt, fi_op op, size_t* count, bool fetching) {
  auto* ep = reinterpret_cast<Endpoint*>(e);
  fi_atomic_attr a{};
  int rc = query_atomic(&ep->dom->d, dt, op, &a, fetching ? FI_FETCH_ATOMIC : 0);
  if (rc == 0 && count) *count = a.count;
  return rc;
}
int atomic_writevalid(fid_ep* ep, fi_datatype dt, fi_op op, size_t* count) {
  return atomic_valid(ep, dt, op, count, false);
}
int atomic_readwritevalid(fid_ep* ep, fi_datatype dt, fi_op op, size_t* count) {
  return atomic_valid(ep, dt, op, count, true);
}

fi_ops_atomic atomic_ops = {sizeof(fi_ops_atomic),
                            atomic_write,
                            NOSYS(fi_ops_atomic, writev),
                            atomic_writemsg,
                            NOSYS(fi_ops_atomic, inject),
                            atomic_readwrite,
                            NOSYS(fi_ops_atomic, readwritev),
                            atomic_readwritemsg,
                            NOSYS(fi_ops_atomic, compwrite),
                            NOSYS(fi_ops_atomic, compwritev),
                            NOSYS(fi_ops_atomic, compwritemsg),
                            atomic_writevalid,
                            atomic_readwritevalid,
                            NOSYS(fi_ops_atomic, compwritevalid)};
TABLE_SLOTS(fi_ops_atomic, 13);
// Endpoints without FI_ATOMIC (the efa profile): every atomic slot says -FI_ENOSYS.
fi_ops_atomic no_atomic_ops = {sizeof(fi_ops_atomic),
                               NOSYS(fi_ops_atomic, write),
                               NOSYS(fi_ops_atomic, writev),
                               NOSYS(fi_ops_atomic, writemsg),
                               NOSYS(fi_ops_atomic, inject),
                               NOSYS(fi_ops_atomic, readwrite),
                               NOSYS(fi_ops_atomic, readwritev),
                               NOSYS(fi_ops_atomic, readwritemsg),
                               NOSYS(fi_ops_atomic, compwrite),
                               NOSYS(fi_ops_atomic, compwritev),
                               NOSYS(fi_ops_atomic, compwritemsg),
                               NOSYS(fi_ops_atomic, writevalid),
                               NOSYS(fi_ops_atomic, readwritevalid),
                               NOSYS(fi_ops_atomic, compwritevalid)};

int ep_open(fid_domain* domain, fi_info* info, fid_ep** out, void* context) {
  auto* d = reinterpret_cast<Domain*>(domain);
  if (!info || (info->ep_attr && info->ep_attr->type != FI_EP_RDM)) return -FI_EINVAL;
  auto* ep = new (std::nothrow) Endpoint;
  if (!ep) return -FI_ENOMEM;
  ep->dom = d;
  ep->info = fi_dupinfo(info);
  ep->sq_size = static_cast<uint32_t>(info->tx_attr && info->tx_attr->size ? info->tx_attr->size : config().tx_depth);
  ep->sq.reset(new (std::nothrow) TxDesc[ep->sq_size]);
  int rc = ep->sq && ep->info ? create_segment(ep) : -FI_ENOMEM;
  if (rc) {
    fi_freeinfo(ep->info);
    delete ep;
    return rc;
  }
  ep->e.fid.fclass = FI_CLASS_EP;
  ep->e.fid.context = context;
  ep->e.fid.ops = &ep_fid_ops;
  ep->e.ops = &ep_ops;
  ep->e.cm = &cm_ops;
  ep->e.msg = &msg_ops;
  ep->e.rma = &rma_ops;
  ep->e.tagged = &tagged_ops;
  ep->e.atomic = (info->caps & FI_ATOMIC) ? &atomic_ops : &no_atomic_ops;
  ep->e.collective = &coll_ops;
  *out = &ep->e;
  return 0;
}

void cleanup() {}

fi_provider provider = {kProviderVersion, kApiVersion, {}, kName, getinfo, fabric_open, cleanup};

}  // namespace

// ---- shared with the engine ----------------------------------------------------------------

namespace {
struct LocalSegment {
  void* map;
  int users;
};
std::mutex seg_mu;
std::unordered_map<std::string, LocalSegment>& local_segments() {
  static auto* m = new std::unordered_map<std::string, LocalSegment>;  // outlives every endpoint
  return *m;
}
}  // namespace

void* segment_attach(const std::string& name) {
  std::lock_guard lk(seg_mu);
  auto it = local_segments().find(name);
  if (it == local_segments().end()) return nullptr;
  ++it->second.users;
  return it->second.map;
}
void segment_add(const std::string& name, void* map) {
  std::lock_guard lk(seg_mu);
  local_segments()[name] = {map, 1};
}
void segment_release(const std::string& name) {
  std::lock_guard lk(seg_mu);
  auto it = local_segments().find(name);
  if (it == local_segments().end()) return;
  if (--it->second.users == 0) {
    note_host_unmapping(it->second.map);
    munmap(it->second.map, wire::segment_bytes());
    local_segments().erase(it);
  }
}

Mr* Domain::check(uint64_t key, uint64_t addr, uint64_t len, uint64_t need, uint32_t* code) {
  std::shared_lock lk(mr_mu);
  auto it = mrs.find(key);
  if (it == mrs.end()) {
    *code = kErrBadKey;
    return nullptr;
  }
  Mr* m = it->second;
  const uint64_t b = reinterpret_cast<uint64_t>(m->base);
  if (addr < b || len > m->len || addr - b > m->len - len) {
    *code = kErrBounds;
    return nullptr;
  }
  if ((m->access & need) != need) {
    *code = kErrAccess;
    return nullptr;
  }
  *code = kErrNone;
  return m;
}

bool Cq::push(const CqEntry& e) {
  std::lock_guard lk(prod_mu);
  const uint64_t t = tail.load(std::memory_order_relaxed);
  if (t - head.load(std::memory_order_acquire) >= cap) return false;
  ring[t & (cap - 1)] = e;
  tail.store(t + 1, std::memory_order_release);
  return true;
}

void Cq::push_err(const fi_cq_err_entry& e, std::string text) {
  std::lock_guard lk(err_mu);
  errs.emplace_back(e, std::move(text));
  nerr.fetch_add(1, std::memory_order_release);
}

}  // namespace anyep_emunic

extern "C" FI_EXT_INI { return &anyep_emunic::provider; }
