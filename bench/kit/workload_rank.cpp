#include "bench/kit/workload_rank.h"

#include <chrono>
#include <vector>

namespace anyep::benchkit {

RankRun run_workload_rank(const WorkloadConfig& w, proxy::ProxyConfig pc, uint32_t threads, transport::Bootstrap& boot,
                          const std::function<std::unique_ptr<transport::Transport>(uint32_t thread)>& make_endpoint) {
  const uint64_t bytes = StreamWorkload::buffer_bytes(w);
  std::vector<uint64_t> buffer((bytes + 7) / 8), counters(StreamWorkload::num_counters(w));
  channel::ChannelConfig cc;
  cc.num_rings = StreamWorkload::num_rings(w);
  cc.capacity = 256;
  channel::Channel ch(cc);
  std::vector<std::unique_ptr<transport::Transport>> eps;
  for (uint32_t t = 0; t < threads; ++t) eps.push_back(make_endpoint(t));
  RankRun out;
  out.transport = eps[0]->capabilities().backend + "/" + eps[0]->capabilities().provider;
  pc.counters = counters.data();
  pc.num_counters = static_cast<uint32_t>(counters.size());
  pc.num_tags = StreamWorkload::num_tags(w);
  proxy::Proxy proxy(pc, ch, std::move(eps), {{"buffer", buffer.data(), bytes}}, boot);
  out.bypass = proxy.bypass();
  out.paths = proxy.describe_paths();
  proxy.start();
  StreamWorkload wl(w, boot.rank(), reinterpret_cast<uint8_t*>(buffer.data()), counters.data(), ch);
  const auto t0 = std::chrono::steady_clock::now();
  out.result = wl.run([&] { proxy.check(); });
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  proxy.stop();
  proxy.check();
  out.stats = proxy.stats();
  return out;
}

}  // namespace anyep::benchkit
