#include "proxy/proxy.h"

#include <cstring>

#include "common/env.h"
#include "common/error.h"
#include "proxy/pinning.h"
#include "proxy/proxy_thread.h"

namespace anyep::proxy {

namespace {
// Thread t of every rank: connect endpoints and import every peer's registrations (same ids on
// every rank: registered in the same order), after checking the regions really are symmetric.
void exchange(transport::Transport& ep, transport::Bootstrap& boot, const SymmetricMemory& sym, uint32_t num_mrs) {
  std::vector<uint8_t> mine(sym.regions().size() * 8);
  for (size_t k = 0; k < sym.regions().size(); ++k) std::memcpy(&mine[8 * k], &sym.regions()[k].length, 8);
  const auto all = boot.allgather(mine);
  for (uint32_t p = 0; p < all.size(); ++p)
    for (size_t k = 0; k < sym.regions().size(); ++k) {
      uint64_t len = 0;
      if (all[p].size() == mine.size()) std::memcpy(&len, &all[p][8 * k], 8);
      if (len != sym.regions()[k].length)
        throw InvalidArgument("proxy: region '" + sym.regions()[k].name + "' is " + std::to_string(len) +
                              " bytes on rank " + std::to_string(p) + " but " +
                              std::to_string(sym.regions()[k].length) +
                              " here: symmetric regions must have the same length on every rank");
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
  if (cfg.native_atomics && !caps.native_atomics)
    throw Unsupported("proxy: native atomics requested, but transport " + caps.backend + "/" + caps.provider +
                      " has none (leave native_atomics off: signals are emulated by the receiving proxy)");
  if (cfg.native_atomics) throw Unsupported("proxy: native remote atomics are not wired up yet; signals are emulated");
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
    s.hosts = &hosts_.layout;
    s.shm = hosts_.shm.get();
    s.dropped = dropped_.get();
    s.engine = EngineConfig{rank_,      num_ranks_, cfg.num_tags, cfg.max_pending,
                            timeout_ns, bypass_,    cfg.counters, cfg.num_counters};
    std::vector<channel::RingConsumer*> rings;
    for (uint32_t r = t; r < channel.num_rings(); r += T) rings.push_back(&channel.consumer(r));
    threads_.push_back(std::make_unique<ProxyThread>(s, std::move(endpoints[t]), *sym_, std::move(rings), error_));
  }
  for (auto& th : threads_) exchange(th->endpoint(), boot, *sym_, th->num_mrs());
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
  }
  return s;
}

}  // namespace anyep::proxy
