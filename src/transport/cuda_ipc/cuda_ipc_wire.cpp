#include "transport/cuda_ipc/cuda_ipc_wire.h"

#include <cstring>

#include "common/error.h"

namespace anyep::transport::cuda_ipc {

WireAddress parse_address(const std::vector<uint8_t>& bytes, uint32_t index, uint32_t num_ranks,
                          const std::string& where) {
  WireAddress a{};
  if (bytes.size() != sizeof a)
    throw InvalidArgument(where + ": address of rank " + std::to_string(index) + " has " +
                          std::to_string(bytes.size()) + " bytes, expected " + std::to_string(sizeof a));
  std::memcpy(&a, bytes.data(), sizeof a);
  a.inbox_name[kShmNameBytes - 1] = '\0';
  if (a.magic != kAddressMagic || a.version != kWireVersion)
    throw InvalidArgument(where + ": address of rank " + std::to_string(index) +
                          " is not a cuda-ipc address (magic/version)");
  if (a.rank != index || a.num_ranks != num_ranks)
    throw InvalidArgument(where + ": address at index " + std::to_string(index) + " is rank " + std::to_string(a.rank) +
                          " of a " + std::to_string(a.num_ranks) + "-rank job");
  return a;
}

WireRegion parse_region(const std::vector<uint8_t>& bytes, uint32_t peer, uint32_t remote_id,
                        const std::string& where) {
  WireRegion w{};
  if (bytes.size() != sizeof w)
    throw InvalidArgument(where + ": region " + std::to_string(remote_id) + " of rank " + std::to_string(peer) +
                          ": descriptor has " + std::to_string(bytes.size()) + " bytes, expected " +
                          std::to_string(sizeof w));
  std::memcpy(&w, bytes.data(), sizeof w);
  if (w.magic != kRegionMagic || w.version != kWireVersion)
    throw InvalidArgument(where + ": region " + std::to_string(remote_id) + " of rank " + std::to_string(peer) +
                          ": not a cuda-ipc region descriptor (magic/version)");
  return w;
}

}  // namespace anyep::transport::cuda_ipc
