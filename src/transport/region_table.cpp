#include "transport/region_table.h"

#include "common/error.h"

namespace anyep::transport {

namespace {
bool inside(const RegionBounds& r, uint64_t off, uint64_t len) { return off <= r.length && len <= r.length - off; }
std::string range(uint64_t off, uint64_t len) {
  std::string s = "[";  // built by appending: GCC 12 -O3 misreads "lit" + std::string as overlapping
  s += std::to_string(off);
  s += ", ";
  s += std::to_string(off);
  s += "+";
  s += std::to_string(len);
  s += ")";
  return s;
}
}  // namespace

MrId RegionTable::add_local(uint64_t base, uint64_t length) {
  local_.push_back({base, length, true});
  return static_cast<MrId>(local_.size() - 1);
}

void RegionTable::check_import(uint32_t peer, MrId id, const std::string& who) const {
  if (peer >= remote_.size())
    throw InvalidArgument(who + ": import_mr from unknown peer " + std::to_string(peer) + " (num_ranks " +
                          std::to_string(remote_.size()) + ")");
  if (id >= kMaxRemoteRegions)
    throw InvalidArgument(who + ": rank " + std::to_string(peer) + " sent region id " + std::to_string(id) +
                          ", above the limit of " + std::to_string(kMaxRemoteRegions) + " regions per rank");
}

void RegionTable::set_remote(uint32_t peer, MrId id, uint64_t base, uint64_t length) {
  check_import(peer, id, "region table");
  auto& v = remote_[peer];
  if (v.size() <= id) v.resize(id + 1);
  v[id] = {base, length, true};
}

const RegionBounds* RegionTable::remote(uint32_t peer, MrId id) const {
  if (peer >= remote_.size() || id >= remote_[peer].size() || !remote_[peer][id].valid) return nullptr;
  return &remote_[peer][id];
}

std::string RegionTable::check_peer(uint32_t peer) const {
  if (peer >= remote_.size())
    return "unknown peer rank " + std::to_string(peer) + " (num_ranks " + std::to_string(remote_.size()) + ")";
  return "";
}

std::string RegionTable::check_imm(uint32_t imm, const Capabilities& caps) const {
  if (caps.imm_bytes >= 4 || (caps.imm_bytes > 0 && (uint64_t{imm} >> (8 * caps.imm_bytes)) == 0)) return "";
  return "immediate " + std::to_string(imm) + " does not fit the provider's " + std::to_string(caps.imm_bytes) +
         "-byte immediate";
}

std::string RegionTable::check_write(const WriteDesc& w, const Capabilities& caps) const {
  if (auto e = check_peer(w.dst_rank); !e.empty()) return e;
  const RegionBounds* l = local(w.local_mr);
  if (!l)
    return "source region " + std::to_string(w.local_mr) + " is not registered (" + std::to_string(local_.size()) +
           " local registrations)";
  if (!inside(*l, w.local_offset, w.length))
    return "source " + range(w.local_offset, w.length) + " is not inside local region " + std::to_string(w.local_mr) +
           " of " + std::to_string(l->length) + " bytes";
  const RegionBounds* r = remote(w.dst_rank, w.remote_mr);
  if (!r)
    return "region " + std::to_string(w.remote_mr) + " of rank " + std::to_string(w.dst_rank) + " was never imported";
  if (!inside(*r, w.remote_offset, w.length))
    return "destination " + range(w.remote_offset, w.length) + " is past the end of region " +
           std::to_string(w.remote_mr) + " of rank " + std::to_string(w.dst_rank) + " (" + std::to_string(r->length) +
           " bytes)";
  if (caps.max_write_bytes && w.length > caps.max_write_bytes)
    return "write of " + std::to_string(w.length) + " bytes exceeds the provider's maximum of " +
           std::to_string(caps.max_write_bytes) + " (split it)";
  if (w.has_imm) return check_imm(w.imm, caps);
  return "";
}

std::string RegionTable::check_atomic(const AtomicAddDesc& a) const {
  if (auto e = check_peer(a.dst_rank); !e.empty()) return e;
  const RegionBounds* r = remote(a.dst_rank, a.remote_mr);
  if (!r)
    return "region " + std::to_string(a.remote_mr) + " of rank " + std::to_string(a.dst_rank) + " was never imported";
  if (a.remote_offset % 8)
    return "atomic add at offset " + std::to_string(a.remote_offset) + " of region " + std::to_string(a.remote_mr) +
           " of rank " + std::to_string(a.dst_rank) + " is not 8-byte aligned";
  if (!inside(*r, a.remote_offset, 8))
    return "atomic add's word " + range(a.remote_offset, 8) + " is past the end of region " +
           std::to_string(a.remote_mr) + " of rank " + std::to_string(a.dst_rank) + " (" + std::to_string(r->length) +
           " bytes)";
  return "";
}

}  // namespace anyep::transport
