#include "runtime/ht/topology.h"

#include <set>

#include "common/error.h"

namespace anyep::runtime {

int ht_ranks_per_node(const std::vector<std::string>& ids, int override_k) {
  using std::to_string;
  const int R = static_cast<int>(ids.size());
  if (R < 1) throw InvalidArgument("anyep HT topology: no ranks");
  if (override_k > 0) {
    if (R % override_k != 0)
      throw InvalidArgument("anyep HT topology: ANYEP_HT_RANKS_PER_NODE=" + to_string(override_k) +
                            " does not divide the " + to_string(R) + " ranks into whole nodes");
    return override_k;
  }
  int k = 1;
  while (k < R && ids[k] == ids[0]) ++k;
  std::set<std::string> seen;  // one identity per node: a host may not come back later
  for (int r = 0; r < R; ++r) {
    const std::string& first = ids[(r / k) * k];
    const bool starts_node = r % k == 0;
    if (R % k != 0 || ids[r] != first || (starts_node && !seen.insert(ids[r]).second))
      throw Unsupported("anyep HT topology: rank " + to_string(r) + " on host '" + ids[r] +
                        "' breaks the node layout of " + to_string(k) +
                        " consecutive ranks per host (the first node's size); high-throughput mode needs nodes of "
                        "equal size, ranks numbered node by node (set ANYEP_HT_RANKS_PER_NODE to override)");
  }
  return k;
}

}  // namespace anyep::runtime
