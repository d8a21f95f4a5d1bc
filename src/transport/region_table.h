// anyep/src/transport/region_table.h — the bounds every backend checks before a write reaches the
// wire: local registrations, imported remote registrations, peer range, immediate width.
// One implementation so that every backend rejects bad input with the same words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace anyep::transport {

struct RegionBounds {
  uint64_t base = 0;    // start address in the owner's address space (0 when unknown/unused)
  uint64_t length = 0;  // bytes
  bool valid = false;
};

class RegionTable {
 public:
  explicit RegionTable(uint32_t num_ranks = 0) : remote_(num_ranks) {}

  MrId add_local(uint64_t base, uint64_t length);
  void set_remote(uint32_t peer, MrId id, uint64_t base, uint64_t length);
  const RegionBounds* local(MrId id) const { return id < local_.size() ? &local_[id] : nullptr; }
  const RegionBounds* remote(uint32_t peer, MrId id) const;
  size_t num_local() const { return local_.size(); }

  // "" when `w` may be posted, else the reason (naming peer, region, offsets).
  std::string check_write(const WriteDesc& w, const Capabilities& caps) const;
  std::string check_peer(uint32_t peer) const;
  std::string check_imm(uint32_t imm, const Capabilities& caps) const;

 private:
  std::vector<RegionBounds> local_;
  std::vector<std::vector<RegionBounds>> remote_;  // [peer][remote MrId]
};

}  // namespace anyep::transport
