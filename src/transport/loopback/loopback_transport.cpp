#include "transport/loopback/loopback_transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>

#include "common/error.h"
#include "transport/region_table.h"

namespace anyep::transport::loopback {

namespace {
struct Region {
  uint8_t* base = nullptr;
  uint64_t length = 0;
};
static_assert(sizeof(Region) == 16, "Region is the loopback descriptor format");

// Immediates from one source endpoint to one destination endpoint. Each endpoint is driven by one
// thread (transport.h), so this is single producer (the source's thread, in post_*) and single
// consumer (the destination's thread, in poll): a lock-free ring, with each side caching the
// other's index so an idle poll reads one line that only changes when something was published.
// When the ring is full the producer spills into a locked overflow list and keeps using it until
// the consumer drained it; the consumer takes the overflow only when the ring is empty. Ring
// entries are always older than overflow entries, so the pair stays in posting order.
struct PairQueue {
  explicit PairQueue(uint32_t n) : slots(new uint32_t[n]), capacity(n) {}
  // Producer's line.
  alignas(64) std::atomic<uint64_t> tail{0};
  uint64_t head_seen = 0;  // producer's last view of head
  bool spilled = false;    // producer: overflow holds entries, append there
  // Consumer's line.
  alignas(64) std::atomic<uint64_t> head{0};
  uint64_t tail_seen = 0;  // consumer's last view of tail
  alignas(64) const std::unique_ptr<uint32_t[]> slots;
  const uint64_t capacity;  // power of two
  std::atomic<bool> has_overflow{false};
  std::mutex mu;  // overflow only (a full ring: the consumer is not polling)
  std::deque<uint32_t> overflow;

  void push(uint32_t imm) {
    uint64_t t = tail.load(std::memory_order_relaxed);
    if (!spilled && t - head_seen == capacity) head_seen = head.load(std::memory_order_acquire);
    if (spilled || t - head_seen == capacity) {
      std::lock_guard<std::mutex> g(mu);
      if (spilled && overflow.empty()) {
        spilled = false;  // the consumer took everything: the ring is usable again
        head_seen = head.load(std::memory_order_acquire);
      }
      if (spilled || t - head_seen == capacity) {
        overflow.push_back(imm);
        has_overflow.store(true, std::memory_order_relaxed);  // read under mu or as a hint
        spilled = true;
        return;
      }
    }
    slots[t & (capacity - 1)] = imm;
    // Release: the slot (and the write's data, copied before the call) is visible to the
    // consumer that acquires the new tail.
    tail.store(t + 1, std::memory_order_release);
  }

  // Appends up to `max` entries to out[]; returns how many.
  size_t pop(uint32_t src, ImmEvent* out, size_t max) {
    uint64_t h = head.load(std::memory_order_relaxed);
    if (h == tail_seen) tail_seen = tail.load(std::memory_order_acquire);
    size_t n = 0;
    for (; n < max && h != tail_seen; ++n, ++h) out[n] = {src, slots[h & (capacity - 1)]};
    if (n) head.store(h, std::memory_order_release);  // release: the producer may reuse the slots
    if (n < max && h == tail_seen && has_overflow.load(std::memory_order_relaxed)) {
      // Re-check the ring under the lock: the producer does not append to it while spilled, so an
      // empty ring here means every ring entry is older than the overflow's first.
      std::lock_guard<std::mutex> g(mu);
      if (tail.load(std::memory_order_acquire) == h) {
        for (; n < max && !overflow.empty(); ++n) {
          out[n] = {src, overflow.front()};
          overflow.pop_front();
        }
        has_overflow.store(!overflow.empty(), std::memory_order_relaxed);
      }
    }
    return n;
  }
};

}  // namespace

class Fabric {
 public:
  explicit Fabric(uint32_t n) : n(n), queues(static_cast<size_t>(n) * n), claimed(n, false) {
    // Deep rings (a sender rarely spills) within ~4 MiB of slots per fabric: 4096 per pair up to
    // 16 ranks, fewer beyond (the overflow keeps it correct at any depth).
    uint64_t slots = 4096;
    while (slots > 64 && slots * n * n > (1u << 20)) slots /= 2;
    for (auto& q : queues) q = std::make_unique<PairQueue>(static_cast<uint32_t>(slots));
  }
  PairQueue& queue(uint32_t src, uint32_t dst) { return *queues[static_cast<size_t>(dst) * n + src]; }
  uint32_t n;
  std::vector<std::unique_ptr<PairQueue>> queues;  // [dst][src]
  std::mutex mu;
  std::vector<bool> claimed;
};

namespace {

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<Fabric> f, uint32_t rank) : fabric_(std::move(f)), rank_(rank) {
    caps_.backend = "loopback";
    caps_.provider = "loopback";
    caps_.ordered_writes = true;
    caps_.imm_bytes = 4;
    caps_.native_atomics = true;  // post_atomic_add: a CPU atomic on the peer's memory (one process)
    caps_.placed_writes = true;   // a write is a memmove at post time, its completion comes after it
    caps_.gpu_memory = false;
    caps_.max_write_bytes = 1ull << 40;
    regions_ = RegionTable(num_ranks());
  }

  const Capabilities& capabilities() const override { return caps_; }
  uint32_t rank() const override { return rank_; }
  uint32_t num_ranks() const override { return fabric_->n; }

  MrId register_memory(void* base, size_t length, MemKind kind) override {
    if (kind != MemKind::kHost) throw Unsupported("loopback transport: only host memory can be registered");
    if (!base && length)
      throw InvalidArgument("loopback transport: register_memory(nullptr, " + std::to_string(length) + ")");
    return regions_.add_local(reinterpret_cast<uint64_t>(base), length);
  }

  std::vector<uint8_t> export_mr(MrId id) const override {
    const RegionBounds* b = regions_.local(id);
    if (!b) throw InvalidArgument("loopback transport: export_mr of unknown region " + std::to_string(id));
    Region r{reinterpret_cast<uint8_t*>(b->base), b->length};
    std::vector<uint8_t> d(sizeof(Region));
    std::memcpy(d.data(), &r, sizeof(Region));
    return d;
  }

  std::vector<uint8_t> local_address() const override {
    std::vector<uint8_t> a(sizeof(uint32_t));
    std::memcpy(a.data(), &rank_, sizeof(uint32_t));
    return a;
  }

  void connect(const std::vector<std::vector<uint8_t>>& addresses) override {
    if (addresses.size() != num_ranks())
      throw InvalidArgument("loopback transport: connect got " + std::to_string(addresses.size()) + " addresses for " +
                            std::to_string(num_ranks()) + " ranks");
    connected_ = true;
  }

  void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) override {
    if (peer >= num_ranks())
      throw InvalidArgument("loopback transport: import_mr from unknown peer " + std::to_string(peer));
    if (desc.size() != sizeof(Region)) throw InvalidArgument("loopback transport: malformed region descriptor");
    Region r;
    std::memcpy(&r, desc.data(), sizeof(Region));
    regions_.set_remote(peer, remote_id, reinterpret_cast<uint64_t>(r.base), r.length);
  }

  int post_write(const WriteDesc& w) override {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (!regions_.write_ok(w, caps_)) return fail(-EINVAL, "post_write: " + regions_.check_write(w, caps_));
    if (w.length)
      std::memmove(reinterpret_cast<uint8_t*>(regions_.remote(w.dst_rank, w.remote_mr)->base) + w.remote_offset,
                   reinterpret_cast<const uint8_t*>(regions_.local(w.local_mr)->base) + w.local_offset, w.length);
    if (w.has_imm) deliver(w.dst_rank, w.imm);
    comps_.push_back({w.context, 0});
    return 0;
  }

  int post_atomic_add(const AtomicAddDesc& a) override {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (!regions_.atomic_ok(a)) return fail(-EINVAL, "post_atomic_add: " + regions_.check_atomic(a));
    auto* word = reinterpret_cast<uint64_t*>(
        reinterpret_cast<uint8_t*>(regions_.remote(a.dst_rank, a.remote_mr)->base) + a.remote_offset);
    // Sequentially consistent, like a NIC atomic seen by the target's own atomic reads; applied
    // before the completion is queued, which is the contract.
    __atomic_fetch_add(word, a.value, __ATOMIC_SEQ_CST);
    comps_.push_back({a.context, 0});
    return 0;
  }

  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    if (int rc = check_peer(dst_rank)) return rc;
    deliver(dst_rank, imm);
    comps_.push_back({context, 0});
    return 0;
  }

  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    // Local completions: a vector drained from the front, cleared once empty (no allocation once
    // it reached its working size).
    const size_t nc = std::min(max_comps, comps_.size() - comps_read_);
    if (nc) std::memcpy(comps, comps_.data() + comps_read_, nc * sizeof(Completion));
    comps_read_ += nc;
    if (comps_read_ == comps_.size()) comps_.clear(), comps_read_ = 0;
    *n_comps = nc;
    // Immediates: every source's queue, starting one further each call so no source starves.
    size_t ni = 0;
    const uint32_t n = fabric_->n;
    for (uint32_t k = 0; k < n && ni < max_imms; ++k) {
      const uint32_t src = next_src_ + k < n ? next_src_ + k : next_src_ + k - n;
      ni += fabric_->queue(src, rank_).pop(src, imms + ni, max_imms - ni);
    }
    next_src_ = next_src_ + 1 == n ? 0 : next_src_ + 1;
    *n_imms = ni;
    return 0;
  }

  std::string last_error() const override { return last_error_; }

 private:
  int check_peer(uint32_t peer) {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (auto e = regions_.check_peer(peer); !e.empty()) return fail(-EINVAL, e);
    return 0;
  }
  int fail(int rc, std::string msg) {
    last_error_ = "loopback transport (rank " + std::to_string(rank_) + "): " + std::move(msg);
    return rc;
  }
  // The data copy above happens-before the peer's poll (release in push).
  void deliver(uint32_t dst, uint32_t imm) { fabric_->queue(rank_, dst).push(imm); }

  std::shared_ptr<Fabric> fabric_;
  uint32_t rank_;
  Capabilities caps_;
  bool connected_ = false;
  RegionTable regions_;
  std::vector<Completion> comps_;
  size_t comps_read_ = 0;
  uint32_t next_src_ = 0;
  std::string last_error_;
};

}  // namespace

std::shared_ptr<Fabric> make_fabric(uint32_t num_ranks) {
  if (num_ranks == 0) throw InvalidArgument("loopback transport: num_ranks must be >= 1");
  return std::make_shared<Fabric>(num_ranks);
}

std::unique_ptr<Transport> make_endpoint(const std::shared_ptr<Fabric>& fabric, uint32_t rank) {
  if (!fabric) throw InvalidArgument("loopback transport: null fabric");
  std::lock_guard<std::mutex> g(fabric->mu);
  if (rank >= fabric->claimed.size())
    throw InvalidArgument("loopback transport: rank " + std::to_string(rank) + " out of range (num_ranks " +
                          std::to_string(fabric->claimed.size()) + ")");
  if (fabric->claimed[rank])
    throw InvalidArgument("loopback transport: rank " + std::to_string(rank) + " already has an endpoint");
  fabric->claimed[rank] = true;
  return std::make_unique<LoopbackTransport>(fabric, rank);
}

}  // namespace anyep::transport::loopback
