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
// Hardened against strangers on the port (docs/transport.md, "Bootstrap"): every hello carries
// the job's secret, a hello with the wrong secret or for a rank already joined is refused (and
// logged on stderr) while the real rank can still join, each connection must send its hello
// within hello_timeout_s (a silent client never blocks the others), and a peer-sent frame longer
// than max_frame_bytes is refused, never allocated.
struct TcpBootstrapOptions {
  double timeout_s = 30;                          // joining, and each allgather
  double hello_timeout_s = 2;                     // rank 0: per connection, from accept to a full hello
  uint64_t max_frame_bytes = uint64_t{16} << 20;  // one rank's allgather contribution
  std::string secret;                             // at most kMaxBootstrapSecret bytes; "" = none
  // Rank 0 only: an already bound and listening socket (tcp_bootstrap_listen), taken over and
  // closed by the bootstrap; -1: rank 0 binds host:port itself.
  int listen_fd = -1;
};
constexpr size_t kMaxBootstrapSecret = 64;

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size,
                                              const TcpBootstrapOptions& opt);
// As above with the secret from ANYEP_BOOTSTRAP_SECRET (empty: none) and default limits.
std::unique_ptr<Bootstrap> make_tcp_bootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size,
                                              double timeout_s);

// A launcher binds rank 0's socket before starting any rank, so nobody can take the port between
// choosing and binding it: port 0 lets the kernel pick (*bound_port says which). Returns the
// listening socket (close-on-exec) for TcpBootstrapOptions::listen_fd of rank 0.
int tcp_bootstrap_listen(const std::string& host, uint16_t port, uint16_t* bound_port);

// A fresh random secret (32 hex digits from the kernel's random source) for a launcher to hand out.
std::string make_bootstrap_secret();

// Exchanges endpoint addresses and the descriptors of `regions` (local MrIds, registered in the
// same order on every rank) so that every rank can post_write into every peer's regions.
void connect_all(Transport& t, Bootstrap& b, const std::vector<MrId>& regions);

}  // namespace anyep::transport
