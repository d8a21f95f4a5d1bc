#include "transport/libfabric/libfabric_transport.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "transport/libfabric/libfabric_nic.h"
#include "transport/region_table.h"

#ifdef ANYEP_FI_HAVE_CUDART
#include <cuda_runtime_api.h>
#endif

namespace anyep::transport::libfabric {

namespace {

// Region descriptor (export_mr): fixed header, then one 64-bit key per NIC.
struct MrDescHeader {
  uint64_t magic;     // 64 bits: kMrMagic
  uint64_t length;    // 64 bits: registered bytes
  uint64_t base;      // 64 bits: owner's virtual address (used when FI_MR_VIRT_ADDR)
  uint32_t num_nics;  // 32 bits: keys that follow
  uint32_t pad;       // 32 bits: zero
};
static_assert(sizeof(MrDescHeader) == 32, "region descriptor header is a wire format");
constexpr uint64_t kMrMagic = 0x726d7066706561ull;  // "aepfpmr"

// Address blob (local_address): u32 num_nics, then per NIC an AddrEntry and addr_len bytes.
struct AddrEntry {
  uint32_t addr_len;     // 32 bits: bytes of the fi_getname address that follow
  uint32_t addr_format;  // 32 bits: its format (fi_info addr_format: FI_SOCKADDR_IN, FI_ADDR_STR, ...)
  uint64_t imm_key;      // 64 bits: key of the peer's immediate-only target
  uint64_t imm_base;     // 64 bits: its address (used when FI_MR_VIRT_ADDR)
};
static_assert(sizeof(AddrEntry) == 24, "address entry is a wire format");

struct RemoteMr {
  uint64_t base = 0;           // added to the offset when the provider wants virtual addresses
  std::vector<uint64_t> keys;  // per NIC
};
struct LocalMr {
  std::vector<fid_mr*> mrs;  // per NIC
  std::vector<void*> descs;  // fi_mr_desc per NIC
  uint8_t* base = nullptr;
};

// Per-op context handed to libfabric; fi_context2 first, as FI_CONTEXT2 requires.
struct Op {
  fi_context2 fctx;
  uint64_t user_ctx;
  uint64_t bytes;
  // post_atomic_add's operand and the old value it fetches: the provider may read the first and
  // writes the second until the op completes, so both live in the op (never on the stack).
  uint64_t operand;
  uint64_t fetched;
  uint32_t next_free;
};

class LibfabricTransport final : public Transport {
 public:
  LibfabricTransport(uint32_t rank, uint32_t num_ranks, const LibfabricConfig& cfg)
      : rank_(rank), n_(num_ranks), regions_(num_ranks) {
    if (num_ranks == 0 || rank >= num_ranks)
      throw InvalidArgument("libfabric transport: rank " + std::to_string(rank) + " not in [0, " +
                            std::to_string(num_ranks) + ")");
    if (cfg.max_imm_bytes > 4) throw InvalidArgument("libfabric transport: max_imm_bytes must be <= 4");
    std::string prov = choose_provider(cfg.provider);
    std::string why;
    if (!query_provider(prov, cfg.want_hmem, infos_, &why, cfg.want_atomics)) throw Unsupported(why);
    if (cfg.num_nics > 64)
      throw InvalidArgument("libfabric transport: NIC count " + std::to_string(cfg.num_nics) + " not in [0, 64]");
    striping_ = cfg.striping;
    for (const fi_info* i : pick_domains(infos_.head, cfg.num_nics)) nics_.push_back(open_nic(i, n_));
    distinct_domains_ = static_cast<uint32_t>(pick_domains(infos_.head, 0).size());
    fill_capabilities(cfg);
    // One op pool over all NICs, sized by their transmit queues.
    size_t total = 0;
    for (auto& nic : nics_) total += nic->tx_depth;
    ops_.resize(total);
    for (size_t i = 0; i < total; ++i) ops_[i].next_free = static_cast<uint32_t>(i + 1);
    free_head_ = 0;
  }

  ~LibfabricTransport() override {
    // Endpoints go first: nothing in flight may touch a registration after it is closed.
    for (auto& nic : nics_) {
      if (nic->ep) fi_close(&nic->ep->fid);
      nic->ep = nullptr;
    }
    for (auto& m : local_)
      for (fid_mr* mr : m.mrs) fi_close(&mr->fid);
  }

  const Capabilities& capabilities() const override { return caps_; }
  uint32_t rank() const override { return rank_; }
  uint32_t num_ranks() const override { return n_; }

  MrId register_memory(void* base, size_t length, MemKind kind) override {
    if (!base || !length)
      throw InvalidArgument("libfabric transport: register_memory needs a non-null base and a length > 0");
    int dev = 0;
    if (kind == MemKind::kCuda) {
      if (!caps_.gpu_memory)
        throw Unsupported("libfabric provider '" + caps_.provider +
                          "' does not offer FI_HMEM here: register host-staged (pinned) buffers instead");
      dev = cuda_device_of(base);
    }
    LocalMr m;
    m.base = static_cast<uint8_t*>(base);
    for (auto& nic : nics_) {
      uint64_t key = 0;
      try {
        m.mrs.push_back(register_on(*nic, base, length, kind, dev, &key));
      } catch (...) {
        for (fid_mr* mr : m.mrs) fi_close(&mr->fid);
        throw;
      }
      m.descs.push_back(fi_mr_desc(m.mrs.back()));
    }
    local_.push_back(std::move(m));
    return regions_.add_local(reinterpret_cast<uint64_t>(base), length);
  }

  std::vector<uint8_t> export_mr(MrId id) const override {
    const RegionBounds* b = regions_.local(id);
    if (!b) throw InvalidArgument("libfabric transport: export_mr of unknown region " + std::to_string(id));
    MrDescHeader h{kMrMagic, b->length, b->base, static_cast<uint32_t>(nics_.size()), 0};
    std::vector<uint8_t> d(sizeof h + 8 * nics_.size());
    std::memcpy(d.data(), &h, sizeof h);
    for (size_t k = 0; k < nics_.size(); ++k) {
      uint64_t key = fi_mr_key(local_[id].mrs[k]);
      std::memcpy(d.data() + sizeof h + 8 * k, &key, 8);
    }
    return d;
  }

  std::vector<uint8_t> local_address() const override {
    std::vector<uint8_t> a(4);
    uint32_t nn = static_cast<uint32_t>(nics_.size());
    std::memcpy(a.data(), &nn, 4);
    for (auto& nic : nics_) {
      AddrEntry e{static_cast<uint32_t>(nic->addr.size()), nic->info->addr_format, nic->imm_key,
                  reinterpret_cast<uint64_t>(&nic->imm_word)};
      size_t at = a.size();
      a.resize(at + sizeof e + nic->addr.size());
      std::memcpy(a.data() + at, &e, sizeof e);
      std::memcpy(a.data() + at + sizeof e, nic->addr.data(), nic->addr.size());
    }
    return a;
  }

  void connect(const std::vector<std::vector<uint8_t>>& addresses) override {
    if (connected_) throw InvalidArgument("libfabric transport: connect called twice");
    if (addresses.size() != n_)
      throw InvalidArgument("libfabric transport: connect got " + std::to_string(addresses.size()) + " addresses for " +
                            std::to_string(n_) + " ranks");
    const size_t nn = nics_.size();
    std::vector<std::vector<std::vector<uint8_t>>> per_nic(nn, std::vector<std::vector<uint8_t>>(n_));
    imm_targets_.assign(n_, std::vector<std::pair<uint64_t, uint64_t>>(nn));
    for (uint32_t r = 0; r < n_; ++r) {
      const auto& blob = addresses[r];
      auto bad = [&](const std::string& why) {
        return InvalidArgument("libfabric transport: address of rank " + std::to_string(r) + " is malformed: " + why);
      };
      uint32_t peer_nics = 0;
      if (blob.size() < 4) throw bad("too short");
      std::memcpy(&peer_nics, blob.data(), 4);
      if (peer_nics != nn)
        throw InvalidArgument("libfabric transport: rank " + std::to_string(r) + " has " + std::to_string(peer_nics) +
                              " NICs, rank " + std::to_string(rank_) + " has " + std::to_string(nn) +
                              " (every rank must use the same ANYEP_FI_NICS)");
      size_t at = 4;
      for (size_t k = 0; k < nn; ++k) {
        AddrEntry e;
        if (at + sizeof e > blob.size()) throw bad("truncated");
        std::memcpy(&e, blob.data() + at, sizeof e);
        at += sizeof e;
        if (at + e.addr_len > blob.size()) throw bad("truncated address");
        if (e.addr_format != nics_[k]->info->addr_format)
          throw InvalidArgument("libfabric transport: rank " + std::to_string(r) + "'s address on NIC " +
                                std::to_string(k) + " has address format " + std::to_string(e.addr_format) +
                                ", this rank's " + std::to_string(nics_[k]->info->addr_format) +
                                " (different providers?)");
        per_nic[k][r].assign(blob.begin() + at, blob.begin() + at + e.addr_len);
        at += e.addr_len;
        imm_targets_[r][k] = {e.imm_key, virt_addr(k) ? e.imm_base : 0};
      }
    }
    for (size_t k = 0; k < nn; ++k) {
      Nic& nic = *nics_[k];
      // String addresses (shm: "fi_shm://<pid>:<uid>:<endpoint>") differ in length from rank to
      // rank (pids of different lengths); each is one NUL-terminated string. Every other format
      // is a fixed-size struct (sockaddr_in, ...): the same length on every rank.
      const bool str = nic.info->addr_format == FI_ADDR_STR;
      for (uint32_t r = 0; r < n_; ++r) {
        const std::vector<uint8_t>& a = per_nic[k][r];
        const bool ok = str ? !a.empty() && std::find(a.begin(), a.end(), uint8_t{0}) == a.end() - 1  // one NUL, last
                            : a.size() == nic.addr.size();
        if (!ok)
          throw InvalidArgument("libfabric transport: rank " + std::to_string(r) + "'s address on NIC " +
                                std::to_string(k) + " has " + std::to_string(a.size()) + " bytes, " +
                                (str ? std::string("not one NUL-terminated string")
                                     : "expected " + std::to_string(nic.addr.size()) + " (different providers?)"));
      }
      // One address per call: no provider has to step from one address to the next in an array of
      // strings of different lengths (past the NUL, or by a fixed size: versions differ).
      nic.peers.assign(n_, FI_ADDR_NOTAVAIL);
      for (uint32_t r = 0; r < n_; ++r) {
        int got = fi_av_insert(nic.av, per_nic[k][r].data(), 1, &nic.peers[r], 0, nullptr);
        if (got != 1)
          throw TransportError("libfabric transport: fi_av_insert on NIC " + std::to_string(k) + " of rank " +
                               std::to_string(r) + "'s address inserted " + std::to_string(got) + " of 1");
      }
      bool identity = true;
      for (uint32_t r = 0; r < n_; ++r) {
        nic.src[nic.peers[r]] = r;
        identity = identity && nic.peers[r] == r;
      }
      if (identity) {
        nic.src_by_index.resize(n_);
        for (uint32_t r = 0; r < n_; ++r) nic.src_by_index[r] = r;
      }
    }
    remote_.assign(n_, {});
    connected_ = true;
  }

  void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) override {
    if (peer >= n_) throw InvalidArgument("libfabric transport: import_mr from unknown peer " + std::to_string(peer));
    if (!connected_) throw InvalidArgument("libfabric transport: import_mr before connect");
    regions_.check_import(peer, remote_id, "libfabric transport");  // before remote_[peer] grows to it
    MrDescHeader h;
    if (desc.size() < sizeof h)
      throw InvalidArgument("libfabric transport: region descriptor from rank " + std::to_string(peer) +
                            " is too short");
    std::memcpy(&h, desc.data(), sizeof h);
    if (h.magic != kMrMagic || h.num_nics != nics_.size() || desc.size() != sizeof h + 8ull * h.num_nics)
      throw InvalidArgument("libfabric transport: region " + std::to_string(remote_id) + " of rank " +
                            std::to_string(peer) + " has a malformed descriptor (not from a libfabric transport with " +
                            std::to_string(nics_.size()) + " NICs)");
    RemoteMr m;
    m.base = virt_addr(0) ? h.base : 0;
    m.keys.resize(h.num_nics);
    std::memcpy(m.keys.data(), desc.data() + sizeof h, 8ull * h.num_nics);
    auto& v = remote_[peer];
    if (v.size() <= remote_id) v.resize(remote_id + 1);
    v[remote_id] = std::move(m);
    regions_.set_remote(peer, remote_id, h.base, h.length);
  }

  // ---- hot path ----
  int post_write(const WriteDesc& w) override {
    Prepared p{};  // (zeroed: GCC cannot see that prepare() fills it whenever it returns 0)
    if (int rc = prepare(w, &p)) return rc;
    return finish_post(p, issue(p), "fi_write", w.dst_rank);
  }

  // Two passes per chunk: check, pick a NIC, take an op and work out every argument first, then
  // issue the provider calls back to back. On shm the writer takes the receiver's region lock for
  // every write, and the receiver takes it whenever it sees a new command: any work between two
  // writes lets the receiver in between them, the lock's cache line then moves across cores for
  // every write, and each write gets several times slower (the bookkeeping of a one-by-one loop,
  // ~10 ns, cost 25-40% of the 64 B message rate between two processes; docs/bench/transport.md).
  int post_writes(const WriteDesc* w, size_t n, size_t* posted) override {
    *posted = 0;
    Prepared p[kPostChunk];
    while (*posted < n) {
      size_t m = 0, want = std::min(kPostChunk, n - *posted);
      int stop = 0;  // why preparing stopped early (reported once the prepared ones are out)
      while (m < want && (stop = prepare(w[*posted + m], &p[m])) == 0) ++m;
      size_t i = 0;
      ssize_t rc = 0;
      while (i < m && (rc = issue(p[i])) == 0) ++i;  // nothing else between two provider calls
      *posted += i;
      if (i < m) {
        for (size_t j = i + 1; j < m; ++j) release_op(*p[j].nic, p[j].op);
        return finish_post(p[i], rc, "fi_write", w[*posted].dst_rank);
      }
      if (stop) return stop;
    }
    return 0;
  }

  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    if (!connected_) return fail(-EINVAL, "post_imm: not connected: call connect() first");
    if (auto e = regions_.check_peer(dst_rank); !e.empty()) return fail(-EINVAL, "post_imm: " + e);
    if (auto e = regions_.check_imm(imm, caps_); !e.empty()) return fail(-EINVAL, "post_imm: " + e);
    uint32_t k = pick_nic(dst_rank, 0);
    Nic& nic = *nics_[k];
    Op* op = alloc_op(nic, context, 0);
    if (!op) return -EAGAIN;
    auto [key, addr] = imm_targets_[dst_rank][k];
    // Zero bytes: nothing to place, so never FI_DELIVERY_COMPLETE (shm would take its SAR path).
    Prepared p{&nic, op, nullptr, 0, nullptr, cq_data(imm), nic.peers[dst_rank], addr, key, true, false};
    return finish_post(p, issue(p), "fi_writedata (immediate only)", dst_rank);
  }

  int post_atomic_add(const AtomicAddDesc& a) override {
    if (!caps_.native_atomics)
      return fail(-EOPNOTSUPP, "post_atomic_add: this endpoint has no native atomics: " + atomics_why_not_);
    if (!connected_) return fail(-EINVAL, "post_atomic_add: not connected: call connect() first");
    if (!regions_.atomic_ok(a)) return fail(-EINVAL, "post_atomic_add: " + regions_.check_atomic(a));
    const uint32_t k = pick_nic(a.dst_rank, 8);
    Nic& nic = *nics_[k];
    Op* op = alloc_op(nic, a.context, 8);
    if (!op) return -EAGAIN;
    op->operand = a.value;
    const RemoteMr& r = remote_[a.dst_rank][a.remote_mr];
    // Counts are elements (one 64-bit word each), not bytes. No descriptors: host memory on a
    // provider without FI_MR_LOCAL (atomics_refusal); an explicit null one, not a null array,
    // because ofi_rxm 1.17 keeps a result descriptor array's entries only when given one.
    fi_ioc src{&op->operand, 1};
    fi_ioc result{&op->fetched, 1};
    fi_rma_ioc dst{r.base + a.remote_offset, 1, r.keys[k]};
    void* no_desc[1] = {nullptr};
    fi_msg_atomic msg{};
    msg.msg_iov = &src;
    msg.desc = no_desc;
    msg.iov_count = 1;
    msg.addr = nic.peers[a.dst_rank];
    msg.rma_iov = &dst;
    msg.rma_iov_count = 1;
    msg.datatype = FI_UINT64;
    msg.op = FI_SUM;
    msg.context = op;
    // A fetching add, whose old value is dropped: its completion carries that value, which exists
    // only once the add has been applied at the target, so the completion means "applied" (the
    // contract) whatever completion levels the provider implements. The plain add with
    // FI_DELIVERY_COMPLETE is wrong in libfabric 1.17: shm then frees the operand's inject buffer
    // twice (target and initiator), so later adds overwrite earlier operands before the target
    // reads them; ofi_rxm writes no completion for an add posted with FI_INJECT.
    const ssize_t rc = fi_fetch_atomicmsg(nic.ep, &msg, &result, no_desc, 1, FI_COMPLETION);
    if (rc == 0) return 0;
    release_op(nic, op);
    if (rc == -FI_EAGAIN) return -EAGAIN;
    return fail(-EIO,
                "fi_fetch_atomicmsg (FI_SUM of 8 bytes to rank " + std::to_string(a.dst_rank) + "): " + fi_err(rc));
  }

  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    *n_comps = *n_imms = 0;
    fi_cq_data_entry e[64];
    fi_addr_t from[64];
    for (uint32_t k = 0; k < nics_.size(); ++k) {
      Nic& nic = *nics_[k];
      // Local completions. Reading the CQ also drives the provider's progress (FI_PROGRESS_MANUAL).
      while (*n_comps < max_comps) {
        ssize_t got = fi_cq_read(nic.txcq, e, std::min<size_t>(64, max_comps - *n_comps));
        if (got == -FI_EAGAIN) break;
        if (got == -FI_EAVAIL) {
          comps[(*n_comps)++] = tx_error(nic);
          continue;
        }
        if (got < 0) return fail(-EIO, "fi_cq_read (transmit, NIC " + std::to_string(k) + "): " + fi_err(got));
        for (ssize_t i = 0; i < got; ++i) {
          Op* op = static_cast<Op*>(e[i].op_context);
          comps[(*n_comps)++] = {op->user_ctx, 0};
          release_op(nic, op);
        }
        if (got < 64) break;
      }
      // Remote immediates; FI_SOURCE gives the AV index of the writer.
      while (*n_imms < max_imms) {
        ssize_t got = source_ == SourceId::kFiSource
                          ? fi_cq_readfrom(nic.rxcq, e, std::min<size_t>(64, max_imms - *n_imms), from)
                          : fi_cq_read(nic.rxcq, e, std::min<size_t>(64, max_imms - *n_imms));
        if (got == -FI_EAGAIN) break;
        if (got == -FI_EAVAIL) return rx_error(nic, k);
        if (got < 0) return fail(-EIO, "fi_cq_readfrom (receive, NIC " + std::to_string(k) + "): " + fi_err(got));
        for (ssize_t i = 0; i < got; ++i) {
          if (!(e[i].flags & FI_REMOTE_CQ_DATA)) continue;  // not ours to report (no data)
          uint32_t src = 0;
          if (source_ == SourceId::kFiSource) {
            // FI_AV_TABLE hands out 0..n-1 in insertion (rank) order: usually a direct index.
            if (from[i] < nic.src_by_index.size()) {
              src = nic.src_by_index[from[i]];
            } else {
              auto it = nic.src.find(from[i]);
              if (it == nic.src.end())
                return fail(-EPROTO, "immediate " + std::to_string(e[i].data) + " on NIC " + std::to_string(k) +
                                         " from an address not in the address vector (fi_addr " +
                                         std::to_string(from[i]) + ")");
              src = it->second;
            }
          } else {
            src = static_cast<uint32_t>(e[i].data >> imm_shift_);
            if (src >= n_)
              return fail(-EPROTO, "CQ data " + std::to_string(e[i].data) + " on NIC " + std::to_string(k) +
                                       " names source rank " + std::to_string(src) + " of " + std::to_string(n_));
          }
          imms[(*n_imms)++] = {src, static_cast<uint32_t>(e[i].data & imm_mask_)};
        }
        if (got < 64) break;
      }
      if (max_comps == 0 && max_imms == 0) fi_cq_read(nic.txcq, nullptr, 0);  // progress only
    }
    return 0;
  }

  std::string last_error() const override { return last_error_; }

  // ---- for describe() / raw_write_handles() ----
  std::string describe() const {
    const fi_info* i = nics_[0]->info;
    std::string s = "libfabric provider=" + caps_.provider + " fabric=" + i->fabric_attr->name + " domains=";
    for (size_t k = 0; k < nics_.size(); ++k) {
      if (k) s += ",";
      s += nics_[k]->info->domain_attr->name;
    }
    s += " (" + std::to_string(distinct_domains_) + " distinct) mr_mode=" + mr_mode_names(i->domain_attr->mr_mode) +
         " tx_order=" + order_names(i->tx_attr->msg_order) + " rx_order=" + order_names(i->rx_attr->msg_order) +
         " cq_data_size=" + std::to_string(i->domain_attr->cq_data_size) +
         " inject=" + std::to_string(i->tx_attr->inject_size) + " tx_depth=" + std::to_string(i->tx_attr->size) +
         " provider_atomics=" + (provider_atomics_ ? "yes" : "no") +
         " native_atomics=" + (caps_.native_atomics ? "yes" : "no (" + atomics_why_not_ + ")") +
         " write_completion=" + (delivery_complete_ ? "delivery (placed)" : "provider default") +
         " hmem=" + (infos_.hmem ? "yes" : "no") + " striping=" + striping_name() + " source_id=" +
         (source_ == SourceId::kFiSource ? "FI_SOURCE" : "cq_data(bit " + std::to_string(imm_shift_) + ")");
    return s;
  }
  RawWrite raw(uint32_t k, MrId local, uint32_t peer, MrId remote) const {
    if (!connected_ || k >= nics_.size() || !regions_.local(local) || !regions_.remote(peer, remote))
      throw InvalidArgument("raw_write_handles: not connected, or unknown NIC/region/peer");
    const Nic& nic = *nics_[k];
    const RemoteMr& r = remote_[peer][remote];
    return {nic.ep,          nic.txcq, nic.rxcq,  local_[local].descs[k],         local_[local].base,
            nic.peers[peer], r.base,   r.keys[k], source_ == SourceId::kFiSource, cq_data(0)};
  }

 private:
  bool virt_addr(size_t k) const { return nics_[k]->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR; }

  const char* striping_name() const {
    return striping_ == Striping::kBytes ? "bytes" : striping_ == Striping::kDest ? "dest" : "rr";
  }

  void fill_capabilities(const LibfabricConfig& cfg) {
    const fi_info* i = nics_[0]->info;
    caps_.backend = "libfabric";
    caps_.provider = i->fabric_attr->prov_name;
    caps_.num_nics = static_cast<uint32_t>(nics_.size());
    uint64_t max_msg = UINT64_MAX;
    size_t cq_data = 8;
    uint64_t order = ~0ull;
    for (auto& nic : nics_) {
      max_msg = std::min<uint64_t>(max_msg, nic->info->ep_attr->max_msg_size);
      cq_data = std::min(cq_data, nic->info->domain_attr->cq_data_size);
      order &= nic->info->tx_attr->msg_order & nic->info->rx_attr->msg_order;
    }
    caps_.max_write_bytes = max_msg;
    choose_source_id(cfg, std::min<size_t>(cq_data, cfg.max_cq_data_bytes));
    caps_.imm_bytes = static_cast<uint32_t>(std::min<size_t>({imm_room_, cfg.max_imm_bytes}));
    // Writes to one peer land in posting order only if the provider orders write-after-write on
    // both sides AND all writes to that peer use one NIC (striping across NICs reorders).
    caps_.ordered_writes = (order & FI_ORDER_WAW) && nics_.size() == 1;
    caps_.gpu_memory = infos_.hmem && (i->caps & FI_HMEM) && cuda_registration_works();
    atomics_why_not_ = atomics_refusal(cfg);
    caps_.native_atomics = atomics_why_not_.empty();
    caps_.atomics_note = atomics_why_not_;
    delivery_complete_ = cfg.delivery_complete;
    caps_.placed_writes = delivery_complete_;  // see issue()
    InfoList probe;
    fi_info* h = fi_dupinfo(i);
    h->caps |= FI_ATOMIC;
    fi_info* res = nullptr;
    provider_atomics_ = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &res) == 0 && res;
    if (res) fi_freeinfo(res);
    fi_freeinfo(h);
  }

  // "" when post_atomic_add runs natively here, else why not (describe() and the -EOPNOTSUPP
  // say it). Whether the provider could do atomics at all is logged by describe() either way.
  std::string atomics_refusal(const LibfabricConfig& cfg) const {
    if (!cfg.want_atomics) return "not asked for (LibfabricConfig::want_atomics)";
    if (!infos_.atomics)
      return "provider '" + caps_.provider +
             "' grants no FI_ATOMIC next to RMA writes (asked with and without FI_HMEM)";
    for (auto& nic : nics_) {
      if (nic->info->domain_attr->mr_mode & FI_MR_LOCAL)
        return "provider '" + caps_.provider +
               "' needs operand and result buffers registered (FI_MR_LOCAL), which anyep does not do";
      fi_atomic_attr ai{};
      if (fi_query_atomic(nic->domain, FI_UINT64, FI_SUM, &ai, FI_FETCH_ATOMIC) != 0 || ai.count < 1)
        return "provider '" + caps_.provider + "' has no fetching 64-bit FI_SUM (fi_query_atomic)";
    }
    return "";
  }

  // How the receiver learns the writer's rank. FI_SOURCE (the AV index of the writer) where the
  // provider reports it for remote-write completions. Providers layered by ofi_rxm (tcp;ofi_rxm,
  // verbs;ofi_rxm in libfabric 1.17) do not (src_addr comes back 0 for every writer, seen
  // 2026-11-22), so there the rank travels in CQ data bits the 32-bit immediate does not use:
  // bits 32..63 when cq_data_size is 8; when it is 4, the top bytes, and imm_bytes shrinks so the
  // proxy knows (never silently).
  void choose_source_id(const LibfabricConfig& cfg, size_t cq_data) {
    bool rxm = caps_.provider.find("ofi_rxm") != std::string::npos;
    const SourceId want = cfg.source_id != SourceId::kAuto ? cfg.source_id
                          : rxm                            ? SourceId::kCqData
                                                           : SourceId::kFiSource;
    if (want == SourceId::kFiSource) {
      source_ = SourceId::kFiSource;
      imm_room_ = std::min<size_t>(4, cq_data);
      imm_shift_ = 32;
    } else if (cq_data >= 8) {
      source_ = SourceId::kCqData;
      imm_room_ = 4;
      imm_shift_ = 32;
    } else {
      size_t rank_bytes = n_ <= 256 ? 1 : n_ <= 65536 ? 2 : 3;
      if (cq_data <= rank_bytes)
        throw Unsupported("libfabric provider '" + caps_.provider + "' reports no writer address and its " +
                          std::to_string(cq_data) + "-byte CQ data cannot carry the rank of " + std::to_string(n_));
      source_ = SourceId::kCqData;
      imm_room_ = cq_data - rank_bytes;
      imm_shift_ = static_cast<uint32_t>(8 * imm_room_);
    }
    imm_mask_ = imm_shift_ >= 32 ? 0xffffffffull : (1ull << imm_shift_) - 1;
  }
  uint64_t cq_data(uint32_t imm) const {
    return source_ == SourceId::kFiSource ? imm : (uint64_t{rank_} << imm_shift_) | imm;
  }

  // A provider may advertise FI_HMEM and still fail every CUDA registration (a libfabric built
  // without CUDA returns -FI_ENOSYS), so gpu_memory is decided by registering a real cudaMalloc'd
  // page on every NIC. No GPU or no CUDA build: false.
  bool cuda_registration_works() {
#ifdef ANYEP_FI_HAVE_CUDART
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return false;
    }
    void* p = nullptr;
    if (cudaMalloc(&p, 4096) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    bool ok = true;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    for (auto& nic : nics_) {
      uint64_t key = 0;
      try {
        fi_close(&register_on(*nic, p, 4096, MemKind::kCuda, dev, &key)->fid);
      } catch (const Error&) {
        ok = false;
      }
    }
    (void)cudaFree(p);
    return ok;
#else
    return false;
#endif
  }

  int cuda_device_of(void* p) const {
#ifdef ANYEP_FI_HAVE_CUDART
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice)
      throw InvalidArgument("libfabric transport: register_memory(kCuda) on a pointer that is not CUDA device memory");
    return a.device;
#else
    throw Unsupported("libfabric transport: built without CUDA, cannot register CUDA memory");
#endif
  }

  uint32_t pick_nic(uint32_t dst, uint64_t bytes) {
    const uint32_t nn = static_cast<uint32_t>(nics_.size());
    if (nn == 1) return 0;
    switch (striping_) {
      case Striping::kDest:
        return dst % nn;
      case Striping::kRoundRobin:
        return rr_++ % nn;
      case Striping::kBytes:
        break;
    }
    uint32_t best = 0;
    for (uint32_t k = 1; k < nn; ++k)
      if (nics_[k]->bytes_in_flight < nics_[best]->bytes_in_flight) best = k;
    return best;
  }

  // Everything one provider call needs, worked out before any call is made (see post_writes).
  static constexpr size_t kPostChunk = 64;  // prepared at once: 64 x 80 bytes of stack
  struct Prepared {
    Nic* nic;
    Op* op;
    const void* buf;
    uint64_t len;
    void* desc;
    uint64_t data;  // CQ data (when imm)
    fi_addr_t dest;
    uint64_t raddr;
    uint64_t key;
    bool imm;
    bool delivery;  // FI_DELIVERY_COMPLETE (LibfabricConfig::delivery_complete, data to place)
  };
  // 0, -EINVAL (bad write; last_error says why) or -EAGAIN (transmit queue or op pool full). On 0
  // an op is reserved: issue() it, then finish_post().
  int prepare(const WriteDesc& w, Prepared* p) {
    if (!connected_) return fail(-EINVAL, "post_write: not connected: call connect() first");
    if (!regions_.write_ok(w, caps_)) return fail(-EINVAL, "post_write: " + regions_.check_write(w, caps_));
    uint32_t k = pick_nic(w.dst_rank, w.length);
    Nic& nic = *nics_[k];
    Op* op = alloc_op(nic, w.context, w.length);
    if (!op) return -EAGAIN;
    const LocalMr& l = local_[w.local_mr];
    const RemoteMr& r = remote_[w.dst_rank][w.remote_mr];
    *p = {&nic,
          op,
          l.base + w.local_offset,
          w.length,
          l.descs[k],
          cq_data(w.imm),
          nic.peers[w.dst_rank],
          r.base + w.remote_offset,
          r.keys[k],
          w.has_imm,
          delivery_complete_ && w.length > 0};
    return 0;
  }
  static ssize_t issue(const Prepared& p) {
    if (p.delivery) {
      // The completion then means the data is in the target's memory (libfabric 1.17, read in its
      // source: tcp acks a write flagged so once the bytes were received into the target buffer;
      // shm completes it once the target copied it out of the bounce buffers, or read it itself
      // over CMA for large writes). The default level gives no such promise: shm completes a small
      // write with CQ data once it is queued for the target, tcp once it went into the socket
      // (tests/mp/transport/test_atomics_mp.cpp, Placement, shows both).
      iovec iov{const_cast<void*>(p.buf), p.len};
      void* desc[1] = {p.desc};
      fi_rma_iov rma{p.raddr, p.len, p.key};
      fi_msg_rma m{};
      m.msg_iov = &iov;
      m.desc = desc;
      m.iov_count = 1;
      m.addr = p.dest;
      m.rma_iov = &rma;
      m.rma_iov_count = 1;
      m.context = p.op;
      m.data = p.data;
      return fi_writemsg(p.nic->ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE | (p.imm ? FI_REMOTE_CQ_DATA : 0));
    }
    return p.imm ? fi_writedata(p.nic->ep, p.buf, p.len, p.desc, p.data, p.dest, p.raddr, p.key, p.op)
                 : fi_write(p.nic->ep, p.buf, p.len, p.desc, p.dest, p.raddr, p.key, p.op);
  }

  // An op is reserved (counted in flight on its NIC) from alloc_op until its completion is read or
  // its post fails (release_op).
  Op* alloc_op(Nic& nic, uint64_t user_ctx, uint64_t bytes) {
    // A full transmit queue (or pool) is backpressure: the caller polls and retries.
    if (nic.ops_in_flight >= nic.tx_depth || free_head_ >= ops_.size()) return nullptr;
    Op* op = &ops_[free_head_];
    free_head_ = op->next_free;
    op->user_ctx = user_ctx;
    op->bytes = bytes;
    nic.ops_in_flight++;
    nic.bytes_in_flight += bytes;
    return op;
  }
  void release_op(Nic& nic, Op* op) {
    nic.ops_in_flight--;
    nic.bytes_in_flight -= op->bytes;
    op->next_free = free_head_;
    free_head_ = static_cast<uint32_t>(op - ops_.data());
  }
  int finish_post(const Prepared& p, ssize_t rc, const char* what, uint32_t dst) {
    if (rc == 0) return 0;
    release_op(*p.nic, p.op);
    if (rc == -FI_EAGAIN) return -EAGAIN;
    return fail(-EIO, std::string(what) + " to rank " + std::to_string(dst) + " failed: " + fi_err(rc));
  }

  Completion tx_error(Nic& nic) {
    fi_cq_err_entry err{};
    fi_cq_readerr(nic.txcq, &err, 0);
    char buf[256] = {0};
    fi_cq_strerror(nic.txcq, err.prov_errno, err.err_data, buf, sizeof buf);
    Op* op = static_cast<Op*>(err.op_context);
    Completion c{op ? op->user_ctx : 0, err.err ? -err.err : -EIO};
    fail(c.status, "write (context " + std::to_string(c.context) + ") failed: " + fi_strerror(err.err) + " / " + buf);
    if (op) release_op(nic, op);
    return c;
  }
  int rx_error(Nic& nic, uint32_t k) {
    fi_cq_err_entry err{};
    fi_cq_readerr(nic.rxcq, &err, 0);
    char buf[256] = {0};
    fi_cq_strerror(nic.rxcq, err.prov_errno, err.err_data, buf, sizeof buf);
    return fail(-EIO, "receive error on NIC " + std::to_string(k) + ": " + fi_strerror(err.err) + " / " + buf);
  }
  int fail(int rc, std::string msg) {
    last_error_ = "libfabric transport (rank " + std::to_string(rank_) + ", " + caps_.provider + "): " + std::move(msg);
    return rc;
  }

  uint32_t rank_, n_;
  InfoList infos_;
  std::vector<std::unique_ptr<Nic>> nics_;
  uint32_t distinct_domains_ = 0;
  Striping striping_ = Striping::kBytes;
  uint32_t rr_ = 0;
  bool provider_atomics_ = false;
  std::string atomics_why_not_;            // "" when capabilities().native_atomics
  bool delivery_complete_ = false;         // writes with data go out with FI_DELIVERY_COMPLETE
  SourceId source_ = SourceId::kFiSource;  // never kAuto once chosen
  size_t imm_room_ = 4;                    // immediate bytes left for the caller
  uint32_t imm_shift_ = 32;                // where the rank starts in CQ data (kCqData)
  uint64_t imm_mask_ = 0xffffffffull;
  Capabilities caps_;
  RegionTable regions_;
  bool connected_ = false;
  std::vector<LocalMr> local_;
  std::vector<std::vector<RemoteMr>> remote_;                            // [peer][remote MrId]
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> imm_targets_;  // [peer][nic] -> key, addr
  std::vector<Op> ops_;
  uint32_t free_head_ = 0;
  std::string last_error_;
};

const LibfabricTransport& as_libfabric(const Transport& t) {
  auto* p = dynamic_cast<const LibfabricTransport*>(&t);
  if (!p) throw InvalidArgument("not a libfabric transport (backend '" + t.capabilities().backend + "')");
  return *p;
}

}  // namespace

std::unique_ptr<Transport> make_libfabric_transport(uint32_t rank, uint32_t num_ranks, const LibfabricConfig& cfg) {
  return std::make_unique<LibfabricTransport>(rank, num_ranks, cfg);
}

bool provider_available(const std::string& provider, std::string* why) {
  InfoList l;
  return query_provider(provider, false, l, why);
}

std::string describe(const Transport& t) { return as_libfabric(t).describe(); }

RawWrite raw_write_handles(Transport& t, uint32_t nic, MrId local, uint32_t peer, MrId remote) {
  return as_libfabric(t).raw(nic, local, peer, remote);
}

}  // namespace anyep::transport::libfabric
