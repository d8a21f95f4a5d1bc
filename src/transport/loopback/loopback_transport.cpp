#include "transport/loopback/loopback_transport.h"

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
struct Inbox {
  std::mutex mu;
  std::deque<ImmEvent> imms;
};

}  // namespace

class Fabric {
 public:
  explicit Fabric(uint32_t n) : inboxes(n), claimed(n, false) {}
  std::vector<Inbox> inboxes;
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
    caps_.native_atomics = false;
    caps_.gpu_memory = false;
    caps_.max_write_bytes = 1ull << 40;
    regions_ = RegionTable(num_ranks());
  }

  const Capabilities& capabilities() const override { return caps_; }
  uint32_t rank() const override { return rank_; }
  uint32_t num_ranks() const override { return static_cast<uint32_t>(fabric_->inboxes.size()); }

  MrId register_memory(void* base, size_t length, MemKind kind) override {
    if (kind != MemKind::kHost) throw Unsupported("loopback transport: only host memory can be registered");
    if (!base && length) throw InvalidArgument("loopback transport: register_memory(nullptr, " + std::to_string(length) + ")");
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
      throw InvalidArgument("loopback transport: connect got " + std::to_string(addresses.size()) +
                            " addresses for " + std::to_string(num_ranks()) + " ranks");
    connected_ = true;
  }

  void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) override {
    if (peer >= num_ranks()) throw InvalidArgument("loopback transport: import_mr from unknown peer " + std::to_string(peer));
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

  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    if (int rc = check_peer(dst_rank)) return rc;
    deliver(dst_rank, imm);
    comps_.push_back({context, 0});
    return 0;
  }

  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    *n_comps = 0;
    while (*n_comps < max_comps && !comps_.empty()) {
      comps[(*n_comps)++] = comps_.front();
      comps_.pop_front();
    }
    *n_imms = 0;
    Inbox& in = fabric_->inboxes[rank_];
    std::lock_guard<std::mutex> g(in.mu);
    while (*n_imms < max_imms && !in.imms.empty()) {
      imms[(*n_imms)++] = in.imms.front();
      in.imms.pop_front();
    }
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
  void deliver(uint32_t dst, uint32_t imm) {
    Inbox& in = fabric_->inboxes[dst];
    std::lock_guard<std::mutex> g(in.mu);  // the data copy above happens-before the peer's poll
    in.imms.push_back({rank_, imm});
  }

  std::shared_ptr<Fabric> fabric_;
  uint32_t rank_;
  Capabilities caps_;
  bool connected_ = false;
  RegionTable regions_;
  std::deque<Completion> comps_;
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
  if (fabric->claimed[rank]) throw InvalidArgument("loopback transport: rank " + std::to_string(rank) + " already has an endpoint");
  fabric->claimed[rank] = true;
  return std::make_unique<LoopbackTransport>(fabric, rank);
}

}  // namespace anyep::transport::loopback
