#include "transport/chaos/chaos_transport.h"

#include <cstring>
#include <deque>
#include <string>

#include "common/env.h"
#include "common/error.h"
#include "transport/forwarding_transport.h"
#include "transport/region_table.h"

namespace anyep::transport::chaos {

namespace {

// splitmix64: tiny, seedable, and identical on every platform (std:: distributions are not).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

// Descriptor header the wrapper prepends to the inner one: the region length, for bounds checks.
struct DescHeader {
  uint64_t magic;   // 64 bits: kDescMagic, catches a chaos rank talking to a plain one
  uint64_t length;  // 64 bits: registered bytes
};
static_assert(sizeof(DescHeader) == 16, "chaos descriptor header is a wire format");
constexpr uint64_t kDescMagic = 0x736f616863706561ull;  // "aepchaos"

struct HeldOp {
  bool is_write;
  WriteDesc w;          // for post_imm: dst_rank, imm, has_imm = true, length 0
  uint64_t release_at;  // poll tick at which it may go to the inner transport
};
template <class T>
struct Held {
  T item;
  uint64_t release_at;
};

class ChaosTransport final : public ForwardingTransport {
 public:
  ChaosTransport(std::unique_ptr<Transport> inner, const ChaosConfig& cfg)
      : ForwardingTransport(std::move(inner)),
        cfg_(cfg),
        rng_{cfg.seed * 0x2545f4914f6cdd1dull + inner_->rank()},
        regions_(inner_->num_ranks()) {
    caps_ = inner_->capabilities();
    caps_.backend = "chaos(" + caps_.backend + ")";
    caps_.ordered_writes = false;  // the whole point
    // placed_writes stays the inner's: a held write is posted to the inner transport first, and
    // its completion surfaces here only after the inner one (held and shuffled, never earlier).
  }

  const Capabilities& capabilities() const override { return caps_; }

  MrId register_memory(void* base, size_t length, MemKind kind) override {
    MrId id = inner_->register_memory(base, length, kind);
    MrId mine = regions_.add_local(reinterpret_cast<uint64_t>(base), length);
    ANYEP_CHECK(id == mine, "chaos and inner registration ids diverged");
    return id;
  }
  std::vector<uint8_t> export_mr(MrId id) const override {
    const RegionBounds* b = regions_.local(id);
    if (!b) throw InvalidArgument("chaos transport: export_mr of unknown region " + std::to_string(id));
    auto inner = inner_->export_mr(id);
    DescHeader h{kDescMagic, b->length};
    std::vector<uint8_t> d(sizeof h + inner.size());
    std::memcpy(d.data(), &h, sizeof h);
    if (!inner.empty()) std::memcpy(d.data() + sizeof h, inner.data(), inner.size());
    return d;
  }
  void connect(const std::vector<std::vector<uint8_t>>& addresses) override {
    inner_->connect(addresses);
    connected_ = true;
  }
  void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) override {
    DescHeader h{};
    if (desc.size() < sizeof h)
      throw InvalidArgument("chaos transport: descriptor from rank " + std::to_string(peer) + " is too short");
    std::memcpy(&h, desc.data(), sizeof h);
    if (h.magic != kDescMagic)
      throw InvalidArgument("chaos transport: descriptor of region " + std::to_string(remote_id) + " from rank " +
                            std::to_string(peer) +
                            " was not exported by a chaos transport (every rank must enable chaos alike)");
    if (peer >= num_ranks())
      throw InvalidArgument("chaos transport: import_mr from unknown peer " + std::to_string(peer));
    inner_->import_mr(peer, remote_id, std::vector<uint8_t>(desc.begin() + sizeof h, desc.end()));
    regions_.set_remote(peer, remote_id, 0, h.length);
  }

  int post_write(const WriteDesc& w) override {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (!regions_.write_ok(w, caps_)) return fail(-EINVAL, "post_write: " + regions_.check_write(w, caps_));
    if (out_.size() >= cfg_.max_held) return -EAGAIN;  // backpressure, as a NIC's full queue
    hold(true, w);
    return 0;
  }
  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    if (auto e = regions_.check_peer(dst_rank); !e.empty()) return fail(-EINVAL, "post_imm: " + e);
    if (auto e = regions_.check_imm(imm, caps_); !e.empty()) return fail(-EINVAL, "post_imm: " + e);
    if (out_.size() >= cfg_.max_held) return -EAGAIN;
    WriteDesc w{};
    w.dst_rank = dst_rank;
    w.has_imm = true;
    w.imm = imm;
    w.context = context;
    hold(false, w);
    return 0;
  }

  // Atomic adds go straight to the inner transport (not held: an add may overtake earlier writes,
  // as on an unordered NIC); their completions are delayed and shuffled with the others in poll().
  int post_atomic_add(const AtomicAddDesc& a) override {
    if (!connected_) return fail(-EINVAL, "not connected: call connect() first");
    const int rc = inner_->post_atomic_add(a);
    if (rc && rc != -EAGAIN) fail(rc, "post_atomic_add: " + inner_->last_error());
    return rc;
  }

  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    ++tick_;
    *n_comps = *n_imms = 0;
    if (int rc = release_outbound()) return rc;
    // Drain the inner transport completely into our holding pens; delays are drawn on arrival.
    Completion c[64];
    ImmEvent im[64];
    while (true) {
      size_t nc = 0, ni = 0;
      if (int rc = inner_->poll(c, 64, &nc, im, 64, &ni)) return fail(rc, "inner poll: " + inner_->last_error());
      for (size_t i = 0; i < nc; ++i) comps_.push_back({c[i], tick_ + delay()});
      for (size_t i = 0; i < ni; ++i) imms_.push_back({im[i], tick_ + delay()});
      if (nc < 64 && ni < 64) break;
    }
    *n_comps = release(comps_, comps, max_comps);
    *n_imms = release(imms_, imms, max_imms);
    return 0;
  }

  std::string last_error() const override { return last_error_; }

 private:
  uint64_t delay() { return rng_.below(uint64_t{cfg_.max_delay} + 1); }

  void hold(bool is_write, const WriteDesc& w) { out_.push_back({is_write, w, tick_ + delay()}); }

  // Posts every due op in a seeded shuffled order. -EAGAIN from the inner transport leaves the op
  // held for the next poll (backpressure never surfaces as an error). Other errors become that
  // op's failed completion.
  int release_outbound() {
    std::vector<size_t> due;
    for (size_t i = 0; i < out_.size(); ++i)
      if (out_[i].release_at <= tick_) due.push_back(i);
    for (size_t i = due.size(); i > 1; --i) std::swap(due[i - 1], due[rng_.below(i)]);
    std::vector<bool> gone(out_.size(), false);
    for (size_t i : due) {
      const HeldOp& op = out_[i];
      int rc = op.is_write ? inner_->post_write(op.w) : inner_->post_imm(op.w.dst_rank, op.w.imm, op.w.context);
      if (rc == -EAGAIN) continue;
      if (rc) {
        last_error_ = "chaos transport: inner post failed: " + inner_->last_error();
        comps_.push_back({{op.w.context, rc}, tick_});
      }
      gone[i] = true;
    }
    std::deque<HeldOp> keep;
    for (size_t i = 0; i < out_.size(); ++i)
      if (!gone[i]) keep.push_back(out_[i]);
    out_.swap(keep);
    return 0;
  }

  // Hands out up to `max` due items in a seeded shuffled order; the rest stay held.
  template <class T>
  size_t release(std::deque<Held<T>>& pen, T* dst, size_t max) {
    std::vector<size_t> due;
    for (size_t i = 0; i < pen.size(); ++i)
      if (pen[i].release_at <= tick_) due.push_back(i);
    for (size_t i = due.size(); i > 1; --i) std::swap(due[i - 1], due[rng_.below(i)]);
    if (due.size() > max) due.resize(max);
    std::vector<bool> gone(pen.size(), false);
    size_t n = 0;
    for (size_t i : due) {
      dst[n++] = pen[i].item;
      gone[i] = true;
    }
    std::deque<Held<T>> keep;
    for (size_t i = 0; i < pen.size(); ++i)
      if (!gone[i]) keep.push_back(pen[i]);
    pen.swap(keep);
    return n;
  }

  int fail(int rc, std::string msg) {
    last_error_ = "chaos transport (rank " + std::to_string(rank()) + "): " + std::move(msg);
    return rc;
  }

  ChaosConfig cfg_;
  Rng rng_;
  Capabilities caps_;
  RegionTable regions_;
  bool connected_ = false;
  uint64_t tick_ = 0;
  std::deque<HeldOp> out_;
  std::deque<Held<Completion>> comps_;
  std::deque<Held<ImmEvent>> imms_;
  std::string last_error_;
};

}  // namespace

std::unique_ptr<Transport> make_chaos_transport(std::unique_ptr<Transport> inner, const ChaosConfig& cfg) {
  if (!inner) throw InvalidArgument("chaos transport: null inner transport");
  return std::make_unique<ChaosTransport>(std::move(inner), cfg);
}

std::optional<ChaosConfig> ChaosConfig::from_env() {
  const std::optional<uint64_t> seed = env::get_seed("ANYEP_CHAOS_SEED");
  if (!seed) return std::nullopt;
  ChaosConfig cfg;
  cfg.seed = *seed;
  cfg.max_delay = static_cast<uint32_t>(env::get_count("ANYEP_CHAOS_MAX_DELAY"));
  return cfg;
}

std::unique_ptr<Transport> maybe_wrap_chaos_from_env(std::unique_ptr<Transport> inner) {
  const std::optional<ChaosConfig> cfg = ChaosConfig::from_env();
  if (!cfg) return inner;
  return make_chaos_transport(std::move(inner), *cfg);
}

}  // namespace anyep::transport::chaos
