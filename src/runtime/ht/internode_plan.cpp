#include "runtime/ht/internode_plan.h"

#include <algorithm>

namespace anyep::runtime {
namespace {
uint64_t pad16(uint64_t n) { return (n + 15) & ~uint64_t{15}; }
}  // namespace

uint64_t ht_route_row_bytes(int64_t num_topk) { return pad16(8 * uint64_t(num_topk)); }

uint64_t ht_dispatch_row_bytes(const HTInternodeRows& r, int64_t num_topk) {
  return pad16(uint64_t(r.hidden) * uint64_t(dtype_bytes(r.x_dtype)) + 4 * uint64_t(r.scale_cols) +
               4 * uint64_t(num_topk));
}

uint64_t ht_combine_row_bytes(const HTInternodeRows& r, int64_t num_topk) {
  return pad16(2 * uint64_t(r.hidden) + 4 * uint64_t(num_topk));
}

int64_t ht_internode_region_bytes(const HTInternodeRows& r, int64_t max_tokens, int nodes) {
  const int64_t K = ht::kMaxTopk;
  const uint64_t widest = std::max({ht_route_row_bytes(K), ht_dispatch_row_bytes(r, K), ht_combine_row_bytes(r, K)});
  return static_cast<int64_t>(ht::internode::Exchange::region_bytes(uint64_t(max_tokens), widest, nodes));
}

}  // namespace anyep::runtime
