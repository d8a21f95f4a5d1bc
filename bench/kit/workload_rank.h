// anyep/bench/kit/workload_rank.h — one rank of the stream workload in its own process: buffer,
// counters, channel, proxy (T endpoints from `make_endpoint`), run, checks. Used by the
// multi-process tests and by the CPU main job.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "bench/kit/workload.h"
#include "proxy/proxy.h"

namespace anyep::benchkit {

struct RankRun {
  WorkloadResult result;
  proxy::ProxyStats stats;
  double seconds = 0;     // workload run time (barrier to barrier)
  bool bypass = false;    // the ordering engine was bypassed
  std::string transport;  // backend/provider of the endpoints
  std::string paths;      // Proxy::describe_paths(): which path signals took
};

RankRun run_workload_rank(const WorkloadConfig& w, proxy::ProxyConfig pc, uint32_t threads, transport::Bootstrap& boot,
                          const std::function<std::unique_ptr<transport::Transport>(uint32_t thread)>& make_endpoint);

}  // namespace anyep::benchkit
