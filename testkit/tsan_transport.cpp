#include "testkit/tsan_transport.h"

#include <atomic>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define ANYEP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ANYEP_TSAN 1
#endif
#endif

#ifdef ANYEP_TSAN
#include <sanitizer/tsan_interface.h>

#include "transport/forwarding_transport.h"
// Exported by the TSan runtime, not declared in its public header.
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace anyep::testkit {

#ifdef ANYEP_TSAN
namespace {

using namespace anyep::transport;

// One per process: a rank is a process, and an ack may come back through any of its endpoints.
char g_nic_edge;
// Registration ids that this process's endpoints add into remotely (post_atomic_add's remote_mr).
// Every rank registers alike (the proxy does), so these are also the ids peers add into here.
std::atomic<uint64_t> g_atomic_targets{0};  // bit i: id i (ids < 64)

// Accesses inside the inner transport's hot-path calls are not tracked (see the header).
struct Untracked {
  Untracked() { __tsan_ignore_thread_begin(); }
  ~Untracked() { __tsan_ignore_thread_end(); }
};

class TsanAwareTransport final : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;

  MrId register_memory(void* base, size_t length, MemKind kind) override {
    const MrId id = inner_->register_memory(base, length, kind);
    if (regions_.size() <= id) regions_.resize(id + 1);
    regions_[id] = {static_cast<char*>(base), length, kind == MemKind::kHost};
    return id;
  }
  int post_atomic_add(const AtomicAddDesc& a) override {
    if (a.remote_mr < 64) g_atomic_targets.fetch_or(1ull << a.remote_mr, std::memory_order_relaxed);
    __tsan_release(&g_nic_edge);  // like a write's post: whatever answers it comes after it
    Untracked u;
    return inner_->post_atomic_add(a);
  }

  int post_write(const WriteDesc& w) override {
    posted(w);
    Untracked u;
    return inner_->post_write(w);
  }
  int post_writes(const WriteDesc* w, size_t n, size_t* posted_n) override {
    for (size_t i = 0; i < n; ++i) posted(w[i]);
    Untracked u;
    return inner_->post_writes(w, n, posted_n);
  }
  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    __tsan_release(&g_nic_edge);
    Untracked u;
    return inner_->post_imm(dst_rank, imm, context);
  }
  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    release_add_targets();
    int rc;
    {
      Untracked u;
      rc = inner_->poll(comps, max_comps, n_comps, imms, max_imms, n_imms);
    }
    if (*n_comps || *n_imms) __tsan_acquire(&g_nic_edge);
    return rc;
  }

 private:
  static constexpr size_t kMaxAddTarget = 64 << 10;  // counters are small; larger regions are not modelled
  struct Region {
    char* base = nullptr;
    size_t length = 0;
    bool host = false;
  };
  // The NIC reads the source bytes now (as far as TSan is told), then the post is visible to
  // whatever completes or answers it.
  void posted(const WriteDesc& w) {
    if (w.local_mr < regions_.size()) {
      const Region& r = regions_[w.local_mr];
      // Out-of-range writes are the inner transport's to refuse; only host bytes are modelled.
      if (r.host && w.length && w.local_offset <= r.length && w.length <= r.length - w.local_offset)
        __tsan_read_range(r.base + w.local_offset, w.length);
    }
    __tsan_release(&g_nic_edge);
  }
  // Native atomics: a peer's add is applied to our memory by the provider inside poll() (shm and
  // ofi_rxm apply it in the target's progress), untracked like the NIC's other accesses, so a
  // consumer's acquire load of the word would sync with nothing. Before each poll, in which an add
  // may be applied and seen at once, every word of the regions adds land in is released after
  // acquiring the NIC edge: the NIC applies an add after everything it had seen, and the
  // consumer's acquire load of the word syncs with that.
  void release_add_targets() {
    const uint64_t targets = g_atomic_targets.load(std::memory_order_relaxed);
    if (!targets) return;
    __tsan_acquire(&g_nic_edge);
    for (uint64_t b = targets; b; b &= b - 1) {
      const size_t id = static_cast<size_t>(__builtin_ctzll(b));
      if (id >= regions_.size() || !regions_[id].host || regions_[id].length > kMaxAddTarget) continue;
      auto* words = reinterpret_cast<uint64_t*>(regions_[id].base);
      for (size_t i = 0; i < regions_[id].length / 8; ++i) __tsan_release(&words[i]);
    }
  }

  std::vector<Region> regions_;
};

}  // namespace

bool tsan_build() { return true; }

std::unique_ptr<transport::Transport> make_tsan_aware_transport(const transport::TransportSpec& spec) {
  transport::TransportSpec plain = spec;
  plain.chaos.reset();
  std::unique_ptr<transport::Transport> t = std::make_unique<TsanAwareTransport>(transport::make_transport(plain));
  if (spec.chaos) t = transport::chaos::make_chaos_transport(std::move(t), *spec.chaos);
  return t;
}

#else

bool tsan_build() { return false; }

std::unique_ptr<transport::Transport> make_tsan_aware_transport(const transport::TransportSpec& spec) {
  return transport::make_transport(spec);
}

#endif

}  // namespace anyep::testkit
