// anyep/src/runtime/ht/topology.h — which ranks form a node for the high-throughput mode: ranks
// of one node reach each other by direct stores (intranode kernels), nodes talk through the proxy
// (the internode path). Plain C++: unit-tested on every machine.
#pragma once

#include <string>
#include <vector>

namespace anyep::runtime {

// Ranks per node from every rank's host identity (proxy::host_identity(), gathered by rank), or
// from ANYEP_HT_RANKS_PER_NODE when set (> 0: emulated nodes of that many consecutive ranks, for
// tests on one machine). Nodes must be consecutive blocks of equal size, as DeepEP's internode
// mode lays them out; throws Unsupported naming the first rank that breaks this, and
// InvalidArgument for an override that does not divide the rank count.
int ht_ranks_per_node(const std::vector<std::string>& host_ids, int override_ranks_per_node);

}  // namespace anyep::runtime
