// anyep/src/transport/bootstrap/bootstrap.h — out-of-band exchange used once at start-up.
//
// Anything that can allgather bytes can bootstrap anyep: torch.distributed, MPI, or the built-in
// TCP rendezvous store for standalone programs and tests. Every wait is bounded and a timeout
// names the ranks that never showed up.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace anyep::transport {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;
  // Collective: every rank contributes `mine`; returns all contributions indexed by rank.
  virtual std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine) = 0;
  virtual void barrier() { allgather({}); }
};

// Out-of-band bootstrap from a user-provided allgather (torch.distributed, MPI, ...).
using AllgatherFn = std::function<std::vector<std::vector<uint8_t>>(const std::vector<uint8_t>&)>;
std::unique_ptr<Bootstrap> make_callback_bootstrap(uint32_t rank, uint32_t size, AllgatherFn fn);

// Built-in TCP rendezvous: rank 0 serves on host:port, the others connect. Waits at most
// timeout_s for every rank to join; then throws anyep::TimeoutError naming the missing ranks.
std::unique_ptr<Bootstrap> make_tcp_bootstrap(const std::string& host, uint16_t port, uint32_t rank,
                                              uint32_t size, double timeout_s);

// Exchanges endpoint addresses and the descriptors of `regions` (local MrIds, registered in the
// same order on every rank) so that every rank can post_write into every peer's regions.
void connect_all(Transport& t, Bootstrap& b, const std::vector<MrId>& regions);

}  // namespace anyep::transport
