// The engine of one emulated NIC port: a thread per endpoint that takes posted descriptors from
// the send queue, paces them by the link model, cuts them into MTU packets and writes those into
// the target's inbound lane; on the target side it checks every packet against the registration
// (key, bounds, access), has the mover place the data, raises the remote CQ entry once the whole
// message is in place, and acks; acks become the sender's completions. Nothing here blocks: a
// full ring or CQ is retried on the next pass, and every wait has the ack timeout behind it.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <new>
#include <set>

#include "emunic.h"

namespace anyep_emunic {

namespace {

constexpr uint64_t kCheckPeriodNs = 10'000'000;  // peer liveness and ack timeouts, every 10 ms
constexpr uint64_t kBurstNs = 4000;              // packets may be queued this far ahead of the wire
// An engine that was not scheduled for a while may catch up on the wire time it missed, up to
// this much (so the average rate holds on a busy host; bursts then run above the link rate).
constexpr uint64_t kCatchUpNs = 200'000;
constexpr uint64_t kEarlyHoldNs = 5'000'000;  // mutation: data held back after its early completion
constexpr uint32_t kSpinPasses = 32;          // idle passes spun before yielding the CPU
constexpr size_t kEfaWindow = 16;             // messages whose packets interleave (efa)

struct Peer {
  std::string addr;
  std::string name;  // the segment's
  void* map = nullptr;
  bool local = false;  // a segment of this process (segment_attach)
  wire::SegHdr* hdr = nullptr;
  wire::LaneTx tx;
  pid_t pid = 0;
  bool dead = false;
  uint64_t last_check = 0;
  uint64_t inflight = 0;            // this endpoint's ops towards the peer awaiting an ack
  std::deque<wire::AckEntry> acks;  // acks towards the peer not yet sent
};

struct OpState {
  enum State : uint8_t { kFree, kSending, kAwaitAck, kDone };
  State state = kFree;
  uint64_t msg_id = 0;
  Peer* peer = nullptr;
  uint32_t pkts = 0, sent = 0;
  uint32_t start = 0, stride = 1;  // packet order: (start + k * stride) % pkts (efa shuffles)
  uint64_t sent_ns = 0;
  bool completed_early = false;  // mutation: the completion already went out
};

struct Assembly {
  uint32_t got = 0;
  uint32_t err = kErrNone;
  bool raised = false;  // mutation: the remote CQ entry already went out
};

struct LaneState {
  wire::LaneRx rx;
  Peer* sender = nullptr;  // where acks go
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  bool src_known = false;
  uint64_t hold_until = 0;
  std::unordered_map<uint64_t, Assembly> parts;
};

// Under the mutation the application, having caught the early completion, may free its buffers
// while this engine still moves their data: copies then go through the kernel, which fails with
// EFAULT on memory that is gone instead of faulting the process (the check's report must survive).
bool guarded_copy(void* dst, const void* src, size_t len) {
  iovec from{const_cast<void*>(src), len}, to{dst, len};
  return process_vm_writev(getpid(), &from, 1, &to, 1, 0) == static_cast<ssize_t>(len);
}

uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

}  // namespace

class Engine {
 public:
  explicit Engine(Endpoint* ep) : ep_(ep), cfg_(config()) {
    ns_per_byte_ = 8.0 / cfg_.gbps;
    latency_ns_ = static_cast<uint64_t>(cfg_.latency_us * 1000.0);
    timeout_ns_ = uint64_t{cfg_.timeout_ms} * 1'000'000ull;  // also: a peer engine silent this long is lost
    ops_.resize(ep->sq_size);
    rng_ = cfg_.seed * 0x9e3779b97f4a7c15ull + ep->dom->port + 1;
    seg_ = ep->seg;
    thread_ = std::thread([this] { run(); });
  }
  ~Engine() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
    for (auto& [a, p] : peers_) {
      if (p->local)
        segment_release(p->name);
      else if (p->map) {
        note_host_unmapping(p->map);
        munmap(p->map, wire::segment_bytes());
      }
    }
  }

 private:
  bool ordered() const { return cfg_.profile == Profile::kVerbs; }
  bool early() const { return cfg_.mutate == Mutation::kEarlyCompletion; }
  uint64_t next_rand() {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
  }

  // ---- peers ----
  Peer* peer_by_addr(const std::string& addr) {
    auto& p = peers_[addr];
    if (p) return p.get();
    p = std::make_unique<Peer>();
    p->addr = addr;
    p->name = addr.substr(std::strlen("fi_emunic://"));
    p->map = segment_attach(p->name);  // an endpoint of this process: its own mapping
    p->local = p->map != nullptr;
    int fd = p->local ? -1 : shm_open(p->name.c_str(), O_RDWR, 0);
    if (fd >= 0) {
      void* m = mmap(nullptr, wire::segment_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (m != MAP_FAILED) {
        p->map = m;
        note_host_mapped(m, wire::segment_bytes());  // packets go there: the GPU mover writes them
      }
    }
    if (!p->map || __atomic_load_n(&wire::seg_hdr(p->map)->magic, __ATOMIC_ACQUIRE) != wire::kSegMagic) {
      p->dead = true;
      return p.get();
    }
    p->hdr = wire::seg_hdr(p->map);
    p->pid = static_cast<pid_t>(p->hdr->pid);
    // Claim a lane there (or find the one this endpoint claimed before).
    for (uint32_t i = 0; i < wire::kLanes; ++i) {
      wire::LaneHdr* l = wire::lane(p->map, i);
      uint32_t s = 0;
      if (l->state.compare_exchange_strong(s, 1, std::memory_order_acq_rel)) {
        std::snprintf(l->owner_addr, sizeof l->owner_addr, "%s", ep_->addr.c_str());
        l->owner_pid = static_cast<uint32_t>(getpid());
        l->state.store(2, std::memory_order_release);
        uint32_t used = p->hdr->lanes_used.load(std::memory_order_relaxed);
        while (used < i + 1 && !p->hdr->lanes_used.compare_exchange_weak(used, i + 1, std::memory_order_acq_rel)) {
        }
        p->tx.l = l;
        p->tx.head = l->head.load(std::memory_order_relaxed);
        p->tx.cached_tail = l->tail.load(std::memory_order_acquire);
        return p.get();
      }
    }
    p->dead = true;  // every lane of the target taken: reported as a lost peer
    return p.get();
  }
  Peer* peer_by_fi_addr(fi_addr_t a) {
    if (a < by_fi_addr_.size() && by_fi_addr_[a]) return by_fi_addr_[a];
    std::string s;
    {
      std::lock_guard lk(ep_->av->mu);
      if (a >= ep_->av->addrs.size()) return nullptr;
      s = ep_->av->addrs[a];
    }
    Peer* p = peer_by_addr(s);
    if (a >= by_fi_addr_.size()) by_fi_addr_.resize(a + 1, nullptr);
    by_fi_addr_[a] = p;
    return p;
  }
  bool peer_alive(Peer* p, uint64_t now) {
    if (p->dead) return false;
    if (now - p->last_check < kCheckPeriodNs) return true;
    p->last_check = now;
    // The peer stamps its heartbeat with its own clock reading, which may be later than `now`.
    const uint64_t beat = p->hdr->heartbeat_ns.load(std::memory_order_relaxed);
    const bool gone = p->hdr->closed.load(std::memory_order_acquire) || (kill(p->pid, 0) != 0 && errno == ESRCH) ||
                      (now > beat && now - beat > timeout_ns_);
    if (gone) p->dead = true;
    return !gone;
  }

  // ---- completions ----
  void complete(uint64_t idx, int status, uint32_t code, const std::string& detail, const uint64_t* fetched) {
    OpState& o = ops_[idx % ops_.size()];
    const TxDesc& d = ep_->sq[idx % ep_->sq_size];
    if (o.state == OpState::kDone) return;
    if (o.peer && (o.state == OpState::kAwaitAck || o.state == OpState::kSending) && o.peer->inflight)
      --o.peer->inflight;
    o.state = OpState::kDone;
    const uint64_t flags = d.kind == TxDesc::kWrite ? (FI_RMA | FI_WRITE)
                                                    : (FI_ATOMIC | ((d.flags & wire::kFetching) ? FI_READ : FI_WRITE));
    if (status) {
      fi_cq_err_entry e{};
      e.op_context = d.context;
      e.flags = flags;
      e.len = d.len;
      e.err = -status;
      e.prov_errno = static_cast<int>(code);
      ep_->txcq->push_err(e, detail);
    } else if (!o.completed_early) {
      if (fetched && d.result) {
        MoveDesc m;
        m.dst = d.result;
        m.src = fetched;
        m.len = d.len;
        host_mover().execute(m);
      }
      if (d.complete) {
        CqEntry c{};
        c.e.op_context = d.context;
        c.e.flags = flags;
        c.e.len = d.len;
        c.src = FI_ADDR_NOTAVAIL;
        if (!ep_->txcq->push(c)) pending_tx_.push_back(c);
      }
    }
    retire();
  }
  void retire() {
    bool moved = false;
    while (retired_ < fetched_ && ops_[retired_ % ops_.size()].state == OpState::kDone) {
      ops_[retired_ % ops_.size()].state = OpState::kFree;
      ++retired_;
      moved = true;
    }
    if (moved) ep_->sq_free.store(retired_, std::memory_order_release);
  }
  void flush_pending() {
    while (!pending_tx_.empty() && ep_->txcq->push(pending_tx_.front())) pending_tx_.pop_front();
    while (!pending_rx_.empty() && ep_->rxcq && ep_->rxcq->push(pending_rx_.front())) pending_rx_.pop_front();
  }
  void raise_remote(const wire::PktHdr& h, fi_addr_t src) {
    if (!ep_->rxcq) return;
    CqEntry c{};
    c.e.op_context = nullptr;
    c.e.flags = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;
    c.e.len = h.msg_len;
    c.e.data = h.cq_data;
    c.src = src;
    if (!pending_rx_.empty() || !ep_->rxcq->push(c)) pending_rx_.push_back(c);
  }

  // ---- transmit ----
  bool intake(uint64_t now) {
    const uint64_t t = ep_->sq_tail.load(std::memory_order_acquire);
    bool any = false;
    while (fetched_ < t) {
      const uint64_t idx = fetched_++;
      any = true;
      const TxDesc& d = ep_->sq[idx % ep_->sq_size];
      OpState& o = ops_[idx % ops_.size()];
      o = OpState{};
      o.msg_id = idx;
      o.state = OpState::kSending;
      o.pkts = d.kind == TxDesc::kAtomic ? 1 : static_cast<uint32_t>(d.len ? (d.len + wire::kMtu - 1) / wire::kMtu : 1);
      if (!ordered() && o.pkts > 1) {
        o.start = static_cast<uint32_t>(next_rand() % o.pkts);
        do o.stride = static_cast<uint32_t>(1 + next_rand() % o.pkts);
        while (gcd(o.stride, o.pkts) != 1);
      }
      Peer* p = peer_by_fi_addr(d.dest);
      if (!p) {
        complete(idx, -FI_EINVAL, kErrUnknownAddr, "fi_addr " + std::to_string(d.dest), nullptr);
        continue;
      }
      o.peer = p;
      if (!peer_alive(p, now)) {
        complete(idx, -FI_EHOSTUNREACH, kErrPeerLost, p->addr, nullptr);
        continue;
      }
      ++p->inflight;
      sending_.push_back(idx);
    }
    return any;
  }

  // One packet of op `idx`; false when it cannot go now (ring full, wire busy).
  bool emit(uint64_t idx, uint64_t now) {
    OpState& o = ops_[idx % ops_.size()];
    const TxDesc& d = ep_->sq[idx % ep_->sq_size];
    Peer* p = o.peer;
    if (!peer_alive(p, now)) {
      complete(idx, -FI_EHOSTUNREACH, kErrPeerLost, p->addr, nullptr);
      return true;
    }
    if (t_free_ > now + kBurstNs) return false;
    uint8_t* s = p->tx.claim();
    if (!s) return false;
    const uint32_t k = ordered() ? o.sent : static_cast<uint32_t>((o.start + uint64_t{o.sent} * o.stride) % o.pkts);
    auto* h = reinterpret_cast<wire::PktHdr*>(s);
    std::memset(h, 0, sizeof *h);
    h->msg_id = o.msg_id;
    h->raddr = d.raddr;
    h->key = d.key;
    h->pkt_count = o.pkts;
    if (d.kind == TxDesc::kAtomic) {
      h->type = wire::kAtomic;
      h->flags = d.flags;
      h->datatype = d.datatype;
      h->op = d.op;
      h->len = static_cast<uint32_t>(d.len);
      h->msg_len = d.count;
      std::memcpy(s + sizeof *h, d.operand, d.len);
    } else {
      h->type = wire::kData;
      h->flags = d.flags;
      h->offset = uint64_t{k} * wire::kMtu;
      h->len = static_cast<uint32_t>(std::min<uint64_t>(wire::kMtu, d.len - std::min(d.len, h->offset)));
      h->msg_len = d.len;
      h->cq_data = d.cq_data;
      if (h->len) {
        MoveDesc m;
        m.dst = s + sizeof *h;
        m.src = d.buf + h->offset;
        m.len = h->len;
        m.src_iface = d.src_iface;
        m.src_device = d.src_device;
        Mover* mv = mover_for(d.src_iface);
        const bool guarded = early() && d.src_iface == FI_HMEM_SYSTEM;
        if (guarded ? !guarded_copy(m.dst, m.src, m.len) : (!mv || mv->execute(m))) {
          complete(idx, -FI_EIO, kErrMover, "reading the source", nullptr);
          return true;
        }
      }
    }
    // The link: serialization at the port's rate, then the wire's latency.
    t_free_ = std::max(t_free_, now > kCatchUpNs ? now - kCatchUpNs : 0) +
              static_cast<uint64_t>((sizeof *h + h->len) * ns_per_byte_);
    h->deliver_at_ns = t_free_ + latency_ns_;
    p->tx.publish();
    if (++o.sent == o.pkts) {
      o.state = OpState::kAwaitAck;
      o.sent_ns = now;
      if (early() && d.complete) {  // mutation: completion before the data is in place
        o.completed_early = true;
        CqEntry c{};
        c.e.op_context = d.context;
        c.e.flags = d.kind == TxDesc::kWrite ? (FI_RMA | FI_WRITE) : FI_ATOMIC;
        c.e.len = d.len;
        if (!ep_->txcq->push(c)) pending_tx_.push_back(c);
      }
    }
    return true;
  }

  bool transmit(uint64_t now) {
    bool any = false;
    if (ordered()) {
      // FIFO: every packet of a message, in order, before the next message's.
      while (!sending_.empty()) {
        const uint64_t idx = sending_.front();
        OpState& o = ops_[idx % ops_.size()];
        if (o.state != OpState::kSending || o.msg_id != idx) {  // done (its slot may be reused)
          sending_.pop_front();
          continue;
        }
        if (!emit(idx, now)) break;
        any = true;
      }
      return any;
    }
    // Unordered: packets of up to kEfaWindow messages interleave in a seeded random order.
    for (int tries = 0; tries < 256 && !sending_.empty(); ++tries) {
      const size_t w = std::min(kEfaWindow, sending_.size());
      const size_t pick = next_rand() % w;
      const uint64_t idx = sending_[pick];
      OpState& o = ops_[idx % ops_.size()];
      if (o.state != OpState::kSending || o.msg_id != idx) {  // done (its slot may be reused)
        sending_.erase(sending_.begin() + static_cast<std::ptrdiff_t>(pick));
        continue;
      }
      if (!emit(idx, now)) break;
      any = true;
    }
    return any;
  }

  Mover* mover_for(fi_hmem_iface iface) {
    if (iface == FI_HMEM_SYSTEM) return &host_mover();
    Mover* g = gpu_mover();
    return g && g->reaches(iface) ? g : nullptr;
  }

  // ---- receive ----
  void on_ack(const wire::AckEntry& a) {
    if (a.msg_id >= fetched_ || a.msg_id < retired_) return;  // stale
    OpState& o = ops_[a.msg_id % ops_.size()];
    if (o.msg_id != a.msg_id || o.state != OpState::kAwaitAck) return;
    complete(a.msg_id, a.status, a.prov_errno, a.status ? "reported by the target" : "", a.value);
  }

  fi_addr_t lookup_src(LaneState& ls, const char* owner) {
    if (ls.src_known) return ls.src;
    std::lock_guard lk(ep_->av->mu);
    for (size_t i = 0; i < ep_->av->addrs.size(); ++i)
      if (ep_->av->addrs[i] == owner) {
        ls.src = i;
        ls.src_known = true;
        return ls.src;
      }
    return FI_ADDR_NOTAVAIL;
  }

  void ack(LaneState& ls, uint64_t msg_id, uint32_t code, const uint64_t* value, size_t value_bytes) {
    wire::AckEntry a{};
    a.msg_id = msg_id;
    a.prov_errno = code;
    a.status = code == kErrNone     ? 0
               : code == kErrBadKey ? -FI_EKEYREJECTED
               : code == kErrMover  ? -FI_EIO
               : code == kErrAlign  ? -FI_EINVAL
                                    : -FI_EACCES;
    if (value) std::memcpy(a.value, value, value_bytes);
    ls.sender->acks.push_back(a);
    ack_peers_.insert(ls.sender);
  }

  // Handles the packet at the head of lane `i`; false when it must wait (not yet delivered, AV
  // entry missing, CQ full, held back).
  bool receive_one(LaneState& ls, wire::LaneHdr* lh, uint64_t now) {
    uint8_t* s = ls.rx.peek();
    if (!s) return false;
    const auto* h = reinterpret_cast<const wire::PktHdr*>(s);
    if (h->deliver_at_ns > now) {
      next_due_ = std::min(next_due_, h->deliver_at_ns);
      return false;
    }
    if (h->type == wire::kAck) {
      const auto* e = reinterpret_cast<const wire::AckEntry*>(s + sizeof *h);
      for (uint32_t k = 0; k < h->pkt_count; ++k) on_ack(e[k]);
      ls.rx.pop();
      return true;
    }
    if (!ls.sender) ls.sender = peer_by_addr(lh->owner_addr);
    if (ls.sender->dead) {  // nobody to ack: drop
      ls.rx.pop();
      return true;
    }
    if (h->type == wire::kAtomic) {
      const size_t sz = datatype_size(static_cast<fi_datatype>(h->datatype));
      const uint64_t need = FI_REMOTE_WRITE | ((h->flags & wire::kFetching) ? FI_REMOTE_READ : 0);
      uint32_t code = kErrNone;
      Mr* m = ep_->dom->check(h->key, h->raddr, h->len, need, &code);
      uint64_t old[wire::kMaxAtomicBytes / 8] = {};
      if (m && (!sz || h->raddr % sz)) code = kErrAlign;
      if (m && code == kErrNone) {
        MoveDesc d;
        d.kind = MoveDesc::kAtomic;
        d.dst = reinterpret_cast<void*>(h->raddr);
        d.src = s + sizeof *h;
        d.dst_iface = m->iface;
        d.dst_device = m->device;
        d.datatype = static_cast<fi_datatype>(h->datatype);
        d.op = static_cast<fi_op>(h->op);
        d.count = h->msg_len;
        d.result = old;
        Mover* mv = mover_for(m->iface);
        if (!mv || mv->execute(d)) code = kErrMover;
      }
      ack(ls, h->msg_id, code, old, h->len);
      ls.rx.pop();
      return true;
    }
    // A data packet. Its header is copied: once popped, the sender may reuse the slot.
    const wire::PktHdr hd = *h;
    const bool cq = hd.flags & wire::kCqData;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    if (cq) {
      src = lookup_src(ls, lh->owner_addr);
      if (src == FI_ADDR_NOTAVAIL) return false;  // the application has not inserted the writer yet
    }
    // One-packet messages need no assembly, except under the mutation (the hold remembers them).
    Assembly single;
    const bool tracked = hd.pkt_count > 1 || early();
    Assembly& a = tracked ? ls.parts[hd.msg_id] : single;
    if (early() && cq && !a.raised) {
      // Mutation: the remote CQ entry now, the data only after a hold.
      a.raised = true;
      raise_remote(hd, src);
      ls.hold_until = now + kEarlyHoldNs;
      return false;
    }
    if (a.err == kErrNone && hd.msg_len) {
      uint32_t code = kErrNone;
      Mr* m = ep_->dom->check(hd.key, hd.raddr, hd.msg_len, FI_REMOTE_WRITE, &code);
      if (!m) {
        a.err = code;
      } else if (hd.len) {
        MoveDesc d;
        d.dst = reinterpret_cast<void*>(hd.raddr + hd.offset);
        d.src = s + sizeof hd;
        d.len = hd.len;
        d.dst_iface = m->iface;
        d.dst_device = m->device;
        Mover* mv = mover_for(m->iface);
        const bool guarded = early() && m->iface == FI_HMEM_SYSTEM;
        if (guarded ? !guarded_copy(d.dst, d.src, d.len) : (!mv || mv->execute(d))) a.err = kErrMover;
      }
    }
    ls.rx.pop();
    if (++a.got == hd.pkt_count) {
      // The whole message is in place (or refused): the remote CQ entry, then the ack.
      if (cq && a.err == kErrNone && !a.raised) raise_remote(hd, src);
      ack(ls, hd.msg_id, a.err, nullptr, 0);
      if (tracked) ls.parts.erase(hd.msg_id);
    }
    return true;
  }

  bool receive(uint64_t now) {
    bool any = false;
    const uint32_t used = wire::seg_hdr(seg_)->lanes_used.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < used && i < wire::kLanes; ++i) {
      LaneState& ls = lanes_[i];
      if (!ls.rx.l) {
        wire::LaneHdr* lh = wire::lane(seg_, i);
        if (lh->state.load(std::memory_order_acquire) != 2) continue;
        ls.rx.l = lh;
      }
      if (ls.hold_until > now) {
        next_due_ = std::min(next_due_, ls.hold_until);
        continue;
      }
      for (int k = 0; k < 64 && receive_one(ls, ls.rx.l, now); ++k) any = true;
    }
    return any;
  }

  bool send_acks(uint64_t now) {
    bool any = false;
    for (auto it = ack_peers_.begin(); it != ack_peers_.end();) {
      Peer* p = *it;
      while (!p->acks.empty() && !p->dead) {
        uint8_t* s = p->tx.claim();
        if (!s) break;
        auto* h = reinterpret_cast<wire::PktHdr*>(s);
        std::memset(h, 0, sizeof *h);
        h->type = wire::kAck;
        const uint32_t n = static_cast<uint32_t>(std::min<size_t>(wire::kAcksPerPkt, p->acks.size()));
        auto* e = reinterpret_cast<wire::AckEntry*>(s + sizeof *h);
        for (uint32_t k = 0; k < n; ++k) {
          e[k] = p->acks.front();
          p->acks.pop_front();
        }
        h->pkt_count = n;
        h->len = n * static_cast<uint32_t>(sizeof(wire::AckEntry));
        h->deliver_at_ns = now + latency_ns_;
        p->tx.publish();
        any = true;
      }
      if (p->acks.empty() || p->dead) {
        p->acks.clear();
        it = ack_peers_.erase(it);
      } else {
        ++it;
      }
    }
    return any;
  }

  // Every 10 ms: lost peers and ops whose ack is overdue become error completions.
  void housekeeping(uint64_t now) {
    if (now - last_house_ < kCheckPeriodNs) return;
    last_house_ = now;
    wire::seg_hdr(seg_)->heartbeat_ns.store(now, std::memory_order_relaxed);
    for (uint64_t idx = retired_; idx < fetched_; ++idx) {
      OpState& o = ops_[idx % ops_.size()];
      if (o.state == OpState::kDone || !o.peer) continue;
      if (!peer_alive(o.peer, now))
        complete(idx, -FI_EHOSTUNREACH, kErrPeerLost, o.peer->addr, nullptr);
      else if (o.state == OpState::kAwaitAck && now - o.sent_ns > timeout_ns_)
        complete(idx, -FI_ETIMEDOUT, kErrTimeout, o.peer->addr, nullptr);
    }
  }

  void run() {
    uint32_t idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      const uint64_t now = now_ns();
      next_due_ = UINT64_MAX;
      bool any = intake(now);
      any |= transmit(now);
      any |= receive(now);
      any |= send_acks(now);
      flush_pending();
      housekeeping(now);
      if (any) {
        idle = 0;
        continue;
      }
      // Idle: spin briefly (latency), then yield while anything is in flight, then sleep.
      ++idle;
      const bool busy = retired_ < fetched_ || next_due_ != UINT64_MAX || !ack_peers_.empty() || !pending_tx_.empty() ||
                        !pending_rx_.empty();
      if (idle < kSpinPasses) continue;
      if (busy || idle < 2 * kSpinPasses) {
        sched_yield();
        continue;
      }
      timespec ts{0, static_cast<long>(std::min<uint32_t>(idle - 2 * kSpinPasses + 1, 50) * 2000)};  // <= 100 us
      nanosleep(&ts, nullptr);
    }
  }

  Endpoint* ep_;
  const Config& cfg_;
  void* seg_;
  double ns_per_byte_;
  uint64_t latency_ns_;
  uint64_t timeout_ns_;
  uint64_t rng_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<OpState> ops_;
  uint64_t fetched_ = 0, retired_ = 0;
  std::deque<uint64_t> sending_;
  uint64_t t_free_ = 0;
  std::map<std::string, std::unique_ptr<Peer>> peers_;
  std::vector<Peer*> by_fi_addr_;
  LaneState lanes_[wire::kLanes];
  std::set<Peer*> ack_peers_;
  std::deque<CqEntry> pending_tx_, pending_rx_;
  uint64_t next_due_ = UINT64_MAX;
  uint64_t last_house_ = 0;
};

Engine* start_engine(Endpoint* ep) { return new (std::nothrow) Engine(ep); }
void stop_engine(Engine* e) { delete e; }

}  // namespace anyep_emunic
