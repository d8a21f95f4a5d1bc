#include "runtime/ht/internode_plan.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "runtime/common/check.h"

namespace anyep::runtime {
namespace {
uint64_t pad16(uint64_t n) { return (n + 15) & ~uint64_t{15}; }
}  // namespace

HTInternodeRows ht_internode_rows(const TensorRef& x, const TensorRef& x_scales, const TensorRef& topk_idx) {
  using std::to_string;
  expect(x.present() && x.ndim == 2,
         [&] { return "anyep HT internode: x must be 2-D [num_tokens, hidden], got " + shape_str(x); });
  expect(topk_idx.present() && topk_idx.ndim == 2 && topk_idx.shape[0] == x.shape[0], [&] {
    return "anyep HT internode: topk_idx must be [" + to_string(x.shape[0]) + ", num_topk], got " + shape_str(topk_idx);
  });
  HTInternodeRows rows;
  rows.hidden = x.shape[1];
  rows.x_dtype = x.dtype;
  if (x_scales.present()) {
    expect(x_scales.ndim == 2, [&] { return "anyep HT internode: x_scales must be 2-D, got " + shape_str(x_scales); });
    rows.scale_dtype = x_scales.dtype;
    rows.scale_cols = x_scales.shape[1];
  }
  return rows;
}

int64_t ht_internode_node_channels(const HTInternodeRows& rows, int64_t num_topk, int ranks_per_node,
                                   const HTConfig& config) {
  ht::Geometry g;
  if (const char* why = ht::make_geometry(
          ranks_per_node, static_cast<int>(config.num_sms), static_cast<int>(config.chunk_send),
          static_cast<int>(config.chunk_recv),
          ht::dispatch_slot_bytes(static_cast<uint64_t>(rows.hidden) * static_cast<uint64_t>(dtype_bytes(rows.x_dtype)),
                                  static_cast<int>(rows.scale_cols), static_cast<int>(num_topk)),
          &g))
    throw InvalidArgument(std::string("anyep HT internode: the config: ") + why);
  return g.channels;
}

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
