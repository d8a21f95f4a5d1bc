#include "capi/group_record.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace anyep::capi {
namespace {

template <size_t N>
void copy_text(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}

std::string text(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

}  // namespace

GroupRecord make_record(const GroupSpec& s) {
  GroupRecord r;
  std::memset(&r, 0, sizeof r);
  r.magic = kGroupRecordMagic;
  r.version = kGroupRecordVersion;
  r.rank = s.rank;
  r.num_ranks = s.num_ranks;
  r.mode = s.mode;
  r.gpu = s.gpu() ? 1 : 0;
  r.dispatch_dtype = to_c_dtype(s.dispatch_dtype);
  r.combine_dtype = to_c_dtype(s.combine_dtype);
  r.flags = (s.round_scale ? ANYEP_CONFIG_ROUND_SCALE : 0u) | (s.ue8m0 ? ANYEP_CONFIG_UE8M0 : 0u);
  r.num_experts = s.num_experts;
  r.max_tokens = s.max_tokens;
  r.hidden = s.hidden;
  r.ll_bytes = s.ll_bytes;
  r.ht_bytes = s.ht_bytes;
  copy_text(r.ll_path, s.ll_path);
  copy_text(r.library, ANYEP_VERSION_STRING);
  return r;
}

std::vector<uint8_t> to_bytes(const GroupRecord& r) {
  const auto* p = reinterpret_cast<const uint8_t*>(&r);
  return std::vector<uint8_t>(p, p + sizeof r);
}

void check_records(const GroupRecord& mine, const std::vector<std::vector<uint8_t>>& all) {
  using std::to_string;
  if (all.size() != static_cast<size_t>(mine.num_ranks))
    throw InternalError("capi: the bootstrap returned " + to_string(all.size()) + " records for " +
                        to_string(mine.num_ranks) + " ranks");
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string who = "rank " + to_string(i);
    GroupRecord o;
    if (all[i].size() != sizeof o)
      throw InvalidArgument(who + " sent a " + to_string(all[i].size()) +
                            "-byte group record, not an anyep group record (another program on the bootstrap?)");
    std::memcpy(&o, all[i].data(), sizeof o);
    if (o.magic != kGroupRecordMagic || o.version != kGroupRecordVersion)
      throw InvalidArgument(who + " sent no anyep group record of version " + to_string(kGroupRecordVersion));
    if (o.rank != static_cast<int32_t>(i))
      throw InvalidArgument(who + "'s record says rank " + to_string(o.rank) +
                            ": two processes passed the same cfg->rank, or the allgather callback does not order "
                            "contributions by rank");
    const std::string here = " here (rank " + to_string(mine.rank) + ")";
    auto differ = [&](const char* field, const std::string& theirs, const std::string& ours) {
      if (theirs != ours)
        throw InvalidArgument(who + " was created with " + field + "=" + theirs + ", " + ours + here +
                              ": every rank must pass the same configuration");
    };
    differ("library version", text(o.library, sizeof o.library), text(mine.library, sizeof mine.library));
    differ("num_ranks", to_string(o.num_ranks), to_string(mine.num_ranks));
    differ("mode", mode_name(o.mode), mode_name(mine.mode));
    differ("device", o.gpu ? "a GPU" : "ANYEP_DEVICE_NONE", mine.gpu ? "a GPU" : "ANYEP_DEVICE_NONE");
    differ("num_experts", to_string(o.num_experts), to_string(mine.num_experts));
    differ("max_tokens_per_rank", to_string(o.max_tokens), to_string(mine.max_tokens));
    differ("hidden", to_string(o.hidden), to_string(mine.hidden));
    differ("dispatch_dtype", c_dtype_name(o.dispatch_dtype), c_dtype_name(mine.dispatch_dtype));
    differ("combine_dtype", c_dtype_name(o.combine_dtype), c_dtype_name(mine.combine_dtype));
    differ("flags", to_string(o.flags), to_string(mine.flags));
    differ("ll_buffer_bytes (resolved)", to_string(o.ll_bytes), to_string(mine.ll_bytes));
    differ("ht_buffer_bytes", to_string(o.ht_bytes), to_string(mine.ht_bytes));
    differ("ll_path (resolved)", text(o.ll_path, sizeof o.ll_path), text(mine.ll_path, sizeof mine.ll_path));
  }
}

}  // namespace anyep::capi
