#include "proxy/proxy.h"

#include <cstring>

#include "common/env.h"
#include "common/error.h"
#include "proxy/completion_context.h"
#include "proxy/pinning.h"
#include "proxy/proxy_thread.h"

namespace anyep::proxy {

namespace {
// Thread t of every rank: connect endpoints and import every peer's registrations (same ids on
// every rank: registered in the same order), after checking the regions really are symmetric.
// With native atomics the counters are one more registration (after the signal link's), which
// peers add into by offset: every rank must use the same signal path and counter count (checked
// here, before anything is imported).
void exchange(transport::Transport& ep, transport::Bootstrap& boot, const SymmetricMemory& sym, uint32_t num_mrs,
              bool native, uint32_t num_counters) {
  const size_t nr = sym.regions().size();
  std::vector<uint8_t> mine(nr * 8 + 8);
  for (size_t k = 0; k < nr; ++k) std::memcpy(&mine[8 * k], &sym.regions()[k].length, 8);
  const uint32_t sig[2] = {native ? 1u : 0u, num_counters};
  std::memcpy(&mine[8 * nr], sig, 8);
  const auto all = boot.allgather(mine);
  for (uint32_t p = 0; p < all.size(); ++p) {
    const bool shaped = all[p].size() == mine.size();
    for (size_t k = 0; k < nr; ++k) {
      uint64_t len = 0;
      if (shaped) std::memcpy(&len, &all[p][8 * k], 8);
      if (len != sym.regions()[k].length)
        throw InvalidArgument("proxy: region '" + sym.regions()[k].name + "' is " + std::to_string(len) +
                              " bytes on rank " + std::to_string(p) + " but " +
                              std::to_string(sym.regions()[k].length) +
                              " here: symmetric regions must have the same length on every rank");
    }
    uint32_t theirs[2] = {0, 0};
    if (shaped) std::memcpy(theirs, &all[p][8 * nr], 8);
    if (theirs[0] != sig[0])
      throw InvalidArgument("proxy: rank " + std::to_string(p) + " has native_atomics " + (theirs[0] ? "on" : "off") +
                            " but this rank " + (native ? "on" : "off") +
                            ": every rank must send signals the same way (ProxyConfig::native_atomics)");
    if (native && theirs[1] != num_counters)
      throw InvalidArgument("proxy: native atomics: rank " + std::to_string(p) + " has " + std::to_string(theirs[1]) +
                            " signal counters but this rank " + std::to_string(num_counters) +
                            ": peers add into the counters by index, so every rank needs the same count");
  }
  std::vector<transport::MrId> ids(num_mrs);
  for (uint32_t i = 0; i < num_mrs; ++i) ids[i] = i;
  transport::connect_all(ep, boot, ids);
}
}  // namespace

ProxyConfig ProxyConfig::from_env() {
  ProxyConfig c;
  c.timeout_ns = env::get_duration_ns("ANYEP_TIMEOUT_S");
  const std::string ord = env::get_enum("ANYEP_PROXY_ORDERING");
  if (ord == "auto")
    c.ordering = Ordering::kAuto;
  else if (ord == "engine")
    c.ordering = Ordering::kEngine;
  else if (ord == "bypass")
    c.ordering = Ordering::kBypass;
  else
    throw InvalidArgument("ANYEP_PROXY_ORDERING='" + ord + "': expected auto, engine or bypass");
  const int64_t rph = env::get_count("ANYEP_PROXY_RANKS_PER_HOST");
  if (rph > 0) c.ranks_per_node = static_cast<uint32_t>(rph);
  c.native_atomics = env::get_enum("ANYEP_PROXY_ATOMICS") == "native";
  return c;
}

uint32_t Proxy::default_threads() { return static_cast<uint32_t>(env::get_count("ANYEP_PROXY_THREADS")); }

Proxy::Proxy(const ProxyConfig& cfg, channel::Channel& channel,
             std::vector<std::unique_ptr<transport::Transport>> endpoints, const std::vector<Region>& regions,
             transport::Bootstrap& boot)
    : channel_(channel), rank_(boot.rank()), num_ranks_(boot.size()) {
  const uint32_t T = static_cast<uint32_t>(endpoints.size());
  if (T == 0) throw InvalidArgument("proxy: no transport endpoints (one per proxy thread)");
  if (channel.num_rings() < T)
    throw InvalidArgument("proxy: " + std::to_string(T) + " threads but only " + std::to_string(channel.num_rings()) +
                          " rings: every thread needs at least one ring");
  if (!cfg.counters || cfg.num_counters == 0) throw InvalidArgument("proxy: no signal counters given");
  const transport::Capabilities& caps = endpoints[0]->capabilities();
  for (auto& ep : endpoints)
    if (!ep || ep->rank() != rank_ || ep->num_ranks() != num_ranks_)
      throw InvalidArgument("proxy: endpoint rank/size disagree with the bootstrap (rank " + std::to_string(rank_) +
                            " of " + std::to_string(num_ranks_) + ")");
  if (caps.imm_bytes < 4)
    throw Unsupported("proxy: transport " + caps.backend + "/" + caps.provider + " carries " +
                      std::to_string(caps.imm_bytes) + "-byte immediates; the proxy's immediate format needs 4");
  const std::string tname = caps.backend + "/" + caps.provider;
  if (cfg.native_atomics && !caps.native_atomics)
    throw Unsupported(
        "proxy: native atomics requested (ProxyConfig::native_atomics), but transport " + tname + " has none: " +
        (caps.atomics_note.empty() ? "the backend does not implement post_atomic_add" : caps.atomics_note) +
        " (leave native_atomics off: signals are then emulated by the receiving proxy)");
  // The sender posts a fenced signal's add once the writes before it completed locally; that is
  // "signal after data" only if a completion means the bytes are in the target's memory.
  if (cfg.native_atomics && !caps.placed_writes)
    throw Unsupported("proxy: native atomics requested, but on transport " + tname +
                      " a write's completion does not mean its bytes are in the target's memory, so an add posted "
                      "after it could publish data that has not landed (libfabric: set "
                      "LibfabricConfig::delivery_complete; or leave native_atomics off)");
  if (cfg.native_atomics && num_ranks_ > completion::kMaxPeer + 1)
    throw Unsupported("proxy: native atomics support at most " + std::to_string(completion::kMaxPeer + 1) +
                      " ranks (a completion must name its peer); " + std::to_string(num_ranks_) + " given");
  native_ = cfg.native_atomics;
  caps_ = caps;
  if (cfg.ordering != Ordering::kAuto && cfg.ordering != Ordering::kEngine && cfg.ordering != Ordering::kBypass)
    throw InvalidArgument("proxy: ordering " + std::to_string(static_cast<int>(cfg.ordering)) +
                          " is not auto, engine or bypass");
  bypass_ = cfg.ordering == Ordering::kBypass || (cfg.ordering == Ordering::kAuto && caps.ordered_writes);
  if (cfg.timeout_ns == 0) throw InvalidArgument("proxy: timeout_ns must be > 0");
  const uint64_t timeout_ns = cfg.timeout_ns;
  if (cfg.ranks_per_node && (*cfg.ranks_per_node == 0 || *cfg.ranks_per_node > 1u << 20))
    throw InvalidArgument("proxy: ranks per host " + std::to_string(*cfg.ranks_per_node) + ": expected 1.." +
                          std::to_string(1 << 20) + " (leave it unset to detect hosts)");
  sym_ = std::make_unique<SymmetricMemory>(regions);
  dropped_ = std::make_unique<DroppedPeers>(num_ranks_);
  hosts_ = setup_hosts(boot, cfg.ranks_per_node.value_or(0), T);  // 0: detect

  for (uint32_t t = 0; t < T; ++t) {
    ThreadSetup s;
    s.index = t;
    s.num_threads = T;
    s.rank = rank_;
    s.num_ranks = num_ranks_;
    s.cfg = cfg;
    s.timeout_ns = timeout_ns;
    s.bypass = bypass_;
    s.native = native_;
    s.hosts = &hosts_.layout;
    s.shm = hosts_.shm.get();
    s.dropped = dropped_.get();
    s.engine = EngineConfig{rank_,      num_ranks_, cfg.num_tags, cfg.max_pending,
                            timeout_ns, bypass_,    cfg.counters, cfg.num_counters};
    std::vector<channel::RingConsumer*> rings;
    for (uint32_t r = t; r < channel.num_rings(); r += T) rings.push_back(&channel.consumer(r));
    threads_.push_back(std::make_unique<ProxyThread>(s, std::move(endpoints[t]), *sym_, std::move(rings), error_));
  }
  for (auto& th : threads_) exchange(th->endpoint(), boot, *sym_, th->num_mrs(), native_, cfg.num_counters);
  cpus_ = proxy_cpus(cfg.cpus, cfg.numa_node);
}

Proxy::~Proxy() { stop(); }

void Proxy::start() {
  if (!running_.empty()) throw InvalidArgument("proxy: already started");
  stop_.store(false);
  for (uint32_t t = 0; t < threads_.size(); ++t) {
    const int cpu = cpus_.empty() ? -1 : cpus_[t % cpus_.size()];
    running_.emplace_back([this, t, cpu] {
      if (cpu >= 0) pin_current_thread(cpu);
      threads_[t]->run(stop_);
    });
  }
}

void Proxy::stop() {
  stop_.store(true);
  for (auto& th : running_) th.join();
  running_.clear();
}

void Proxy::check() const {
  error_.raise_if_set();
  channel_.check_errors();
}

ProxyStats Proxy::stats() const {
  ProxyStats s;
  for (const auto& th : threads_) {
    const ThreadStats& t = th->stats();
    s.commands += t.commands.load(std::memory_order_relaxed);
    s.writes += t.writes.load(std::memory_order_relaxed);
    s.bytes += t.bytes.load(std::memory_order_relaxed);
    s.signals_sent += t.signals_sent.load(std::memory_order_relaxed);
    s.eagain += t.eagain.load(std::memory_order_relaxed);
    s.signals_applied += t.signals_applied.load(std::memory_order_relaxed);
    s.signals_held += t.signals_held.load(std::memory_order_relaxed);
    s.dropped += t.dropped.load(std::memory_order_relaxed);
    s.signals_native += t.signals_native.load(std::memory_order_relaxed);
  }
  return s;
}

std::string Proxy::describe_paths() const {
  const std::string tname = caps_.backend + "/" + caps_.provider;
  std::string s = "rank " + std::to_string(rank_) + " proxy: " + std::to_string(threads_.size()) + " threads over " +
                  tname + "; signals: ";
  if (native_)
    return s + "native atomics via " + tname +
           " (remote atomic adds posted by the sender once the writes they are fenced after completed; a write "
           "completes once placed at the target)";
  s += bypass_ ? "emulated (records applied by the receiving proxy on arrival: the transport orders writes)"
               : "emulated (records applied by the receiving proxy once its ordering engine saw their writes land)";
  if (!caps_.native_atomics)
    s += "; native atomics: the transport has none (" +
         (caps_.atomics_note.empty() ? std::string("no post_atomic_add") : caps_.atomics_note) + ")";
  else if (!caps_.placed_writes)
    s += "; native atomics: the transport has them, but its write completions do not mean placement";
  else
    s += "; native atomics: available, not asked for (ProxyConfig::native_atomics)";
  return s;
}

}  // namespace anyep::proxy
