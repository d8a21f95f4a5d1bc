// anyep/src/transport/region_table.h — the bounds every backend checks before a write reaches the
// wire: local registrations, imported remote registrations, peer range, immediate width.
// One implementation so that every backend rejects bad input with the same words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace anyep::transport {

// Region ids arrive from peers (connect_all's descriptors) and index per-peer vectors: an id at or
// above this bound is refused, never allocated for. Every rank registers a handful of regions.
constexpr MrId kMaxRemoteRegions = 4096;

struct RegionBounds {
  uint64_t base = 0;    // start address in the owner's address space (0 when unknown/unused)
  uint64_t length = 0;  // bytes
  bool valid = false;
};

class RegionTable {
 public:
  explicit RegionTable(uint32_t num_ranks = 0) : remote_(num_ranks) {}

  MrId add_local(uint64_t base, uint64_t length);
  // Throws InvalidArgument (prefixed by `who`) unless `peer` and `id`, both peer-supplied, are in range.
  void check_import(uint32_t peer, MrId id, const std::string& who) const;
  void set_remote(uint32_t peer, MrId id, uint64_t base, uint64_t length);  // check_import first
  const RegionBounds* local(MrId id) const { return id < local_.size() ? &local_[id] : nullptr; }
  const RegionBounds* remote(uint32_t peer, MrId id) const;
  size_t num_local() const { return local_.size(); }

  // Hot-path verdict: true when `w` may be posted (check_write then returns "").
  bool write_ok(const WriteDesc& w, const Capabilities& caps) const {
    if (w.dst_rank >= remote_.size() || w.local_mr >= local_.size()) return false;
    const RegionBounds& l = local_[w.local_mr];
    if (w.local_offset > l.length || w.length > l.length - w.local_offset) return false;
    const auto& rv = remote_[w.dst_rank];
    if (w.remote_mr >= rv.size()) return false;
    const RegionBounds& r = rv[w.remote_mr];
    if (!r.valid || w.remote_offset > r.length || w.length > r.length - w.remote_offset) return false;
    if (caps.max_write_bytes && w.length > caps.max_write_bytes) return false;
    return !w.has_imm || caps.imm_bytes >= 4 || (caps.imm_bytes > 0 && (uint64_t{w.imm} >> (8 * caps.imm_bytes)) == 0);
  }
  // Hot-path verdict for an atomic add: an imported region holding the whole 8-byte-aligned word.
  bool atomic_ok(const AtomicAddDesc& a) const {
    if (a.dst_rank >= remote_.size() || a.remote_offset % 8) return false;
    const auto& rv = remote_[a.dst_rank];
    if (a.remote_mr >= rv.size()) return false;
    const RegionBounds& r = rv[a.remote_mr];
    return r.valid && r.length >= 8 && a.remote_offset <= r.length - 8;
  }
  // "" when `a` may be posted, else the reason (naming peer, region, offset).
  std::string check_atomic(const AtomicAddDesc& a) const;
  // "" when `w` may be posted, else the reason (naming peer, region, offsets).
  std::string check_write(const WriteDesc& w, const Capabilities& caps) const;
  std::string check_peer(uint32_t peer) const;
  std::string check_imm(uint32_t imm, const Capabilities& caps) const;

 private:
  std::vector<RegionBounds> local_;
  std::vector<std::vector<RegionBounds>> remote_;  // [peer][remote MrId]
};

}  // namespace anyep::transport
