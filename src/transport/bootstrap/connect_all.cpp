#include <cstring>
#include <string>

#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::transport {

namespace {
// Region blob: u32 count, then per region: u32 id, u32 descriptor length, descriptor bytes.
void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  size_t at = b.size();
  b.resize(at + 4);
  std::memcpy(b.data() + at, &v, 4);
}
uint32_t get_u32(const std::vector<uint8_t>& b, size_t& at, uint32_t peer) {
  if (at + 4 > b.size())
    throw InvalidArgument("connect_all: truncated region descriptors from rank " + std::to_string(peer));
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  at += 4;
  return v;
}
}  // namespace

void connect_all(Transport& t, Bootstrap& b, const std::vector<MrId>& regions) {
  if (t.rank() != b.rank() || t.num_ranks() != b.size())
    throw InvalidArgument("connect_all: transport is rank " + std::to_string(t.rank()) + " of " +
                          std::to_string(t.num_ranks()) + " but bootstrap is rank " + std::to_string(b.rank()) +
                          " of " + std::to_string(b.size()));
  t.connect(b.allgather(t.local_address()));

  std::vector<uint8_t> mine;
  put_u32(mine, static_cast<uint32_t>(regions.size()));
  for (MrId id : regions) {
    auto d = t.export_mr(id);
    put_u32(mine, id);
    put_u32(mine, static_cast<uint32_t>(d.size()));
    mine.insert(mine.end(), d.begin(), d.end());
  }
  auto all = b.allgather(mine);
  for (uint32_t peer = 0; peer < all.size(); ++peer) {
    const auto& blob = all[peer];
    size_t at = 0;
    uint32_t count = get_u32(blob, at, peer);
    if (count != regions.size())
      throw InvalidArgument("connect_all: rank " + std::to_string(peer) + " registered " + std::to_string(count) +
                            " regions, rank " + std::to_string(t.rank()) + " registered " +
                            std::to_string(regions.size()) + " (every rank must register the same list)");
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t id = get_u32(blob, at, peer);
      uint32_t len = get_u32(blob, at, peer);
      if (at + len > blob.size())
        throw InvalidArgument("connect_all: truncated descriptor of region " + std::to_string(id) + " from rank " +
                              std::to_string(peer));
      t.import_mr(peer, id, std::vector<uint8_t>(blob.begin() + at, blob.begin() + at + len));
      at += len;
    }
  }
}

}  // namespace anyep::transport
