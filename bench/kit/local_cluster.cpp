#include "bench/kit/local_cluster.h"

#include <cstring>
#include <exception>
#include <thread>

#include "common/error.h"
#include "transport/factory.h"

namespace anyep::benchkit {

EndpointFactory loopback_factory(uint32_t ranks, uint32_t threads) {
  auto fabrics = std::make_shared<std::vector<std::shared_ptr<transport::loopback::Fabric>>>();
  for (uint32_t t = 0; t < threads; ++t) fabrics->push_back(transport::loopback::make_fabric(ranks));
  return [fabrics, ranks](uint32_t rank, uint32_t thread) {
    transport::TransportSpec spec;
    spec.name = "loopback";
    spec.rank = rank;
    spec.num_ranks = ranks;
    spec.loopback.fabric = fabrics->at(thread);
    return transport::make_transport(spec);
  };
}

LocalCluster::LocalCluster(const LocalClusterConfig& cfg) : cfg_(cfg), ranks_(cfg.ranks) {
  if (!cfg_.endpoints) cfg_.endpoints = loopback_factory(cfg.ranks, cfg.threads);
  InProcessGroup group(cfg.ranks, cfg.bootstrap_timeout_s);
  for (uint32_t r = 0; r < cfg.ranks; ++r) {
    Rank& k = ranks_[r];
    const size_t words = (cfg.buffer_bytes + 7) / 8;
    k.buffer.reset(new uint64_t[words]());
    k.counters.reset(new uint64_t[cfg.num_counters]());
    channel::ChannelConfig cc;
    cc.num_rings = cfg.rings;
    cc.capacity = cfg.ring_capacity;
    k.channel = std::make_unique<channel::Channel>(cc);
  }
  // Proxy construction is collective (endpoint exchange): one thread per rank.
  std::vector<std::exception_ptr> errors(cfg.ranks);
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < cfg.ranks; ++r)
    th.emplace_back([&, r] {
      try {
        Rank& k = ranks_[r];
        auto boot = group.member(r);
        std::vector<std::unique_ptr<transport::Transport>> eps;
        for (uint32_t t = 0; t < cfg.threads; ++t) eps.push_back(cfg_.endpoints(r, t));
        proxy::ProxyConfig pc = cfg_.proxy;
        pc.counters = k.counters.get();
        pc.num_counters = cfg.num_counters;
        if (cfg_.per_rank) cfg_.per_rank(r, pc);
        k.proxy = std::make_unique<proxy::Proxy>(
            pc, *k.channel, std::move(eps), std::vector<proxy::Region>{{"buffer", k.buffer.get(), cfg.buffer_bytes}},
            *boot);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

LocalCluster::~LocalCluster() { stop(); }

void LocalCluster::start() {
  for (auto& k : ranks_) k.proxy->start();
}

void LocalCluster::stop() {
  for (auto& k : ranks_)
    if (k.proxy) k.proxy->stop();
}

void LocalCluster::check() {
  for (auto& k : ranks_) k.proxy->check();
}

}  // namespace anyep::benchkit
