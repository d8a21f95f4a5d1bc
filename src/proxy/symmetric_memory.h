// anyep/src/proxy/symmetric_memory.h
//
// The symmetric offset space commands address. Every rank registers the same list of regions with
// the same lengths (the proxy checks this at start-up); region k occupies
//   [start_k, start_k + length_k),   start_0 = 0,   start_{k+1} = align16(start_k + length_k)
// of one offset space, so a command's 16-byte-unit offset names (region, offset) on any rank.
// translate() is on the hot path: a short linear scan, no allocation, no throw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace anyep::proxy {

struct Region {
  std::string name;  // for error messages ("rdma buffer", "ll recv", ...)
  void* base = nullptr;
  uint64_t length = 0;
  transport::MemKind kind = transport::MemKind::kHost;  // how the transport registers it
};

// translate()'s result: a symmetric offset as (region, offset inside that region).
struct RegionOffset {
  uint32_t region;
  uint64_t offset;  // inside the region
};

class SymmetricMemory {
 public:
  // Throws InvalidArgument for an empty list, a null base, or a space larger than a command reaches.
  explicit SymmetricMemory(std::vector<Region> regions);

  // True when [sym_offset, sym_offset + length) lies inside one region.
  bool translate(uint64_t sym_offset, uint64_t length, RegionOffset* out) const {
    for (uint32_t k = 0; k < starts_.size(); ++k) {
      const uint64_t s = starts_[k], len = regions_[k].length;
      if (sym_offset >= s && sym_offset - s <= len && length <= len - (sym_offset - s)) {
        *out = {k, sym_offset - s};
        return true;
      }
    }
    return false;
  }

  const std::vector<Region>& regions() const { return regions_; }
  uint64_t start(uint32_t k) const { return starts_[k]; }
  uint64_t span() const { return span_; }  // end of the last region
  // "regions: rdma buffer [0, 4096), ..." for error messages.
  std::string describe() const;

 private:
  std::vector<Region> regions_;
  std::vector<uint64_t> starts_;
  uint64_t span_ = 0;
};

}  // namespace anyep::proxy
