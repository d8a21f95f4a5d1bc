#include "proxy/symmetric_memory.h"

#include "channel/transfer_cmd.h"
#include "common/error.h"

namespace anyep::proxy {

namespace cmd = channel::cmd;

SymmetricMemory::SymmetricMemory(std::vector<Region> regions) : regions_(std::move(regions)) {
  if (regions_.empty()) throw InvalidArgument("symmetric memory: no regions");
  uint64_t at = 0;
  for (const Region& r : regions_) {
    if (!r.base || r.length == 0)
      throw InvalidArgument("symmetric memory: region '" + r.name + "' has a null base or zero length");
    starts_.push_back(at);
    at += (r.length + cmd::kOffsetAlign - 1) / cmd::kOffsetAlign * cmd::kOffsetAlign;
  }
  span_ = starts_.back() + regions_.back().length;
  if (span_ > cmd::kMaxOffset + cmd::kOffsetAlign)
    throw InvalidArgument("symmetric memory: " + std::to_string(span_) +
                          " bytes exceed what a command offset reaches (" +
                          std::to_string(cmd::kMaxOffset + cmd::kOffsetAlign) + ")");
}

std::string SymmetricMemory::describe() const {
  std::string s = "regions:";
  for (size_t k = 0; k < regions_.size(); ++k)
    s += " '" + regions_[k].name + "' [" + std::to_string(starts_[k]) + ", " +
         std::to_string(starts_[k] + regions_[k].length) + ")";
  return s;
}

}  // namespace anyep::proxy
