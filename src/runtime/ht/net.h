// anyep/src/runtime/ht/net.h — the network half of the internode HT path: the rail exchange
// (kernels/ht/internode_protocol.h) between ranks of the same local index on different nodes,
// through the proxy (ProxyLink). It owns the exchange region (device memory, or pinned host memory
// when the transport cannot register GPU memory) and the exchange's sequence number; it moves
// rows and never knows what a row holds (the Python layer packs tokens into rows).
//
// One exchange, in stream order on every rank: begin() (wait for the rail peers' credits) -> the
// caller writes its blocks into the send area -> send() -> finish() (rows copied out, credits
// returned). Errors found on the device are raised by check_error() (the next call runs it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gpu_runtime.h"
#include "kernels/ht/internode_protocol.h"
#include "kernels/ht/kernels.h"
#include "runtime/common/path.h"
#include "runtime/common/proxy_link.h"
#include "runtime/common/region.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::runtime {

class HTNet {
 public:
  // `num_bytes` (Buffer's num_rdma_bytes) per rank; `ranks_per_node` from ht_ranks_per_node.
  HTNet(int rank, int num_ranks, int ranks_per_node, int64_t num_bytes, int device = -1);
  ~HTNet();
  HTNet(const HTNet&) = delete;
  HTNet& operator=(const HTNet&) = delete;

  void connect(transport::Bootstrap& boot);  // collective over all ranks
  std::string describe_paths() const;

  int nodes() const { return num_ranks_ / ranks_per_node_; }
  int ranks_per_node() const { return ranks_per_node_; }
  int device() const { return device_; }
  bool host_staged() const { return static_cast<bool>(staged_); }
  uint8_t* region() const { return local_; }  // device view
  uint64_t num_bytes() const { return static_cast<uint64_t>(num_bytes_); }
  ht::internode::Exchange exchange() const { return {static_cast<uint64_t>(num_bytes_), nodes()}; }
  // Throws InvalidArgument naming num_rdma_bytes when `rows` rows of `row_bytes` do not fit a block.
  void check_fits(int64_t rows, uint64_t row_bytes, const char* what) const;

  void begin(cudaStream_t stream);
  // send_rows / expect_rows (may be null) / recv_rows: device int64 [nodes].
  void send(const int64_t* send_rows, const int64_t* expect_rows, int64_t* recv_rows, uint64_t row_bytes,
            cudaStream_t stream);
  void finish(const int64_t* recv_rows, uint8_t* out, uint64_t row_bytes, cudaStream_t stream);

  // Device view of the error record (also for the internode composition's kernels, ht/internode.h).
  ErrorRecord* error_record() const { return err_.device_as<ErrorRecord>(); }
  void check_error() const;
  void destroy();

 private:
  ht::NetArgs args(uint64_t row_bytes) const;
  void launch(const ht::NetArgs& a, ht::NetStep step, cudaStream_t stream, const char* what) const;
  void ready(const char* what) const;
  enum class Phase { kIdle, kBegun, kSent };
  int rank_, num_ranks_, ranks_per_node_, device_ = 0;
  int64_t num_bytes_;
  LLPath path_;
  // The exchange region: device memory, or (host-staged) pinned host memory mapped into the GPU;
  // local_ is its GPU address either way.
  DeviceRegion region_;
  MappedHostRegion staged_;
  uint8_t* local_ = nullptr;
  MappedHostRegion err_;  // ErrorRecord
  std::vector<std::unique_ptr<transport::Transport>> endpoints_;
  std::unique_ptr<ProxyLink> link_;  // after the regions: its threads stop before they are freed
  uint64_t seq_ = 0;
  uint64_t timeout_ns_ = 0;
  Phase phase_ = Phase::kIdle;
  bool destroyed_ = false;
};

}  // namespace anyep::runtime
