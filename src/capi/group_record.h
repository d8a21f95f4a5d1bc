// anyep/src/capi/group_record.h — what every rank sends at group creation so that a rank whose
// configuration differs is named before anything is allocated. Fixed widths, one version byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capi/config.h"

namespace anyep::capi {

struct GroupRecord {
  uint32_t magic;  // kGroupRecordMagic
  uint32_t version;
  int32_t rank;
  int32_t num_ranks;
  int32_t mode;                           // anyep_mode_t
  int32_t gpu;                            // 1: has a GPU buffer, 0: GPU-free
  int32_t dispatch_dtype, combine_dtype;  // anyep_dtype_t
  uint32_t flags;                         // ANYEP_CONFIG_*
  uint32_t reserved;
  int64_t num_experts, max_tokens, hidden, ll_bytes, ht_bytes;
  char ll_path[32];
  char library[16];  // ANYEP_VERSION_STRING of the library
};
static_assert(sizeof(GroupRecord) == 128, "GroupRecord is 128 bytes on the wire");
constexpr uint32_t kGroupRecordMagic = 0x47504541;  // "AEPG"
constexpr uint32_t kGroupRecordVersion = 1;

GroupRecord make_record(const GroupSpec& s);
std::vector<uint8_t> to_bytes(const GroupRecord& r);
// Throws InvalidArgument naming the first rank whose record is not a record for its index or
// differs from `mine`, and the field.
void check_records(const GroupRecord& mine, const std::vector<std::vector<uint8_t>>& all);

}  // namespace anyep::capi
