#include "runtime/common/ipc_peers.h"

#include <unistd.h>

#include <cstring>
#include <string>

#include "common/cuda_check.h"
#include "common/error.h"

namespace anyep::runtime {

std::vector<uint8_t> make_ipc_record(uint32_t magic, int rank, int device, void* base, int64_t num_bytes) {
  IpcRecord info{};
  info.magic = magic;
  info.rank = rank;
  gethostname(info.host, sizeof(info.host) - 1);
  cuda_check(cudaDeviceGetPCIBusId(info.pci, sizeof(info.pci), device), "anyep connect", "cudaDeviceGetPCIBusId");
  if (base != nullptr) cuda_check(cudaIpcGetMemHandle(&info.handle, base), "anyep connect", "cudaIpcGetMemHandle");
  info.num_bytes = num_bytes;
  std::vector<uint8_t> out(sizeof(info));
  std::memcpy(out.data(), &info, sizeof(info));
  return out;
}

std::vector<IpcRecord> parse_ipc_records(const std::vector<std::vector<uint8_t>>& infos, uint32_t magic, int num_ranks,
                                         int64_t num_bytes, const char* who) {
  using std::to_string;
  if (static_cast<int>(infos.size()) != num_ranks)
    throw InvalidArgument(std::string(who) + ": got " + to_string(infos.size()) + " records for " +
                          to_string(num_ranks) + " ranks");
  std::vector<IpcRecord> out(infos.size());
  for (int r = 0; r < num_ranks; ++r) {
    if (infos[r].size() != sizeof(IpcRecord))
      throw InvalidArgument(std::string(who) + ": record of rank " + to_string(r) + " has the wrong size");
    std::memcpy(&out[r], infos[r].data(), sizeof(IpcRecord));
    if (out[r].magic != magic || out[r].rank != r)
      throw InvalidArgument(std::string(who) + ": record " + to_string(r) +
                            " is not this buffer kind's record for that rank");
    if (out[r].num_bytes != num_bytes)
      throw InvalidArgument(std::string(who) + ": rank " + to_string(r) + " allocated " + to_string(out[r].num_bytes) +
                            " bytes, this rank " + to_string(num_bytes) + " (buffers must be symmetric)");
  }
  return out;
}

uint8_t* open_ipc_peer(const IpcRecord& rec, int device, const char* who) {
  char my_host[64] = {};
  gethostname(my_host, sizeof(my_host) - 1);
  if (std::strncmp(rec.host, my_host, sizeof(my_host)) != 0) return nullptr;  // another node
  int peer_dev = -1;
  if (cudaDeviceGetByPCIBusId(&peer_dev, rec.pci) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  int can = (peer_dev == device);
  if (!can) cuda_check(cudaDeviceCanAccessPeer(&can, device, peer_dev), who, "cudaDeviceCanAccessPeer");
  if (!can) return nullptr;
  void* p = nullptr;
  std::string what = "cudaIpcOpenMemHandle for rank ";
  what += std::to_string(rec.rank);
  cuda_check(cudaIpcOpenMemHandle(&p, rec.handle, cudaIpcMemLazyEnablePeerAccess), who, what);
  return static_cast<uint8_t*>(p);
}

IpcPeers::IpcPeers(int num_ranks, const char* label)
    : host_(static_cast<size_t>(num_ranks), nullptr),
      opened_(static_cast<size_t>(num_ranks), false),
      table_(sizeof(uint8_t*) * static_cast<size_t>(num_ranks), label) {}

void IpcPeers::open(const std::vector<IpcRecord>& recs, int self, uint8_t* local, int device, bool open_peers,
                    const char* who) {
  for (int r = 0; r < size(); ++r) {
    if (opened_[r]) continue;  // a repeated connect keeps its mappings
    if (r == self) {
      host_[r] = local;
    } else if (open_peers) {
      host_[r] = open_ipc_peer(recs[r], device, who);  // null: no direct path
      opened_[r] = host_[r] != nullptr;
    }
  }
  cuda_check(cudaMemcpy(table_.data(), host_.data(), sizeof(uint8_t*) * host_.size(), cudaMemcpyHostToDevice), who,
             "upload the peer table");
}

void IpcPeers::close() noexcept {
  for (size_t r = 0; r < host_.size(); ++r)
    if (opened_[r]) cudaIpcCloseMemHandle(host_[r]);
  host_.assign(host_.size(), nullptr);
  opened_.assign(opened_.size(), false);
  table_.reset();
}

int IpcPeers::first_unreachable() const {
  for (int r = 0; r < size(); ++r)
    if (!host_[r]) return r;
  return -1;
}

}  // namespace anyep::runtime
