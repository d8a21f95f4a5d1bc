// Built-in TCP rendezvous: a star around rank 0. Every peer keeps one socket to rank 0; an
// allgather is "everyone sends to rank 0, rank 0 sends everything back". Start-up only, so
// simplicity beats latency. Every blocking step is a poll() bounded by the caller's timeout.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::transport {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x61657062;  // "aepb": guards against a stranger on the port

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t size;
};
static_assert(sizeof(Hello) == 12, "Hello is a wire format");

std::string errstr(int e) { return std::string(std::strerror(e)); }

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms > 1000 ? 1000 : ms);
}

// Waits until fd is ready for `events` or the deadline passes (false).
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw TransportError("tcp bootstrap: poll failed: " + errstr(errno));
    if (Clock::now() >= deadline) return false;
  }
}

// Returns "" on success or a reason; never blocks past the deadline.
std::string send_all(int fd, const void* p, size_t n, Clock::time_point deadline) {
  auto* c = static_cast<const uint8_t*>(p);
  while (n) {
    if (!wait_fd(fd, POLLOUT, deadline)) return "timed out sending";
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return "send failed: " + errstr(errno);
    c += k;
    n -= static_cast<size_t>(k);
  }
  return "";
}
std::string recv_all(int fd, void* p, size_t n, Clock::time_point deadline) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    if (!wait_fd(fd, POLLIN, deadline)) return "timed out receiving";
    ssize_t k = ::recv(fd, c, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k == 0) return "connection closed by peer";
    if (k < 0) return "recv failed: " + errstr(errno);
    c += k;
    n -= static_cast<size_t>(k);
  }
  return "";
}

std::string send_frame(int fd, const std::vector<uint8_t>& b, Clock::time_point deadline) {
  uint64_t len = b.size();
  std::string e = send_all(fd, &len, sizeof len, deadline);
  return e.empty() ? send_all(fd, b.data(), b.size(), deadline) : e;
}
std::string recv_frame(int fd, std::vector<uint8_t>& b, Clock::time_point deadline) {
  uint64_t len = 0;
  std::string e = recv_all(fd, &len, sizeof len, deadline);
  if (!e.empty()) return e;
  if (len > (1ull << 32)) return "frame of " + std::to_string(len) + " bytes is not a bootstrap frame";
  b.resize(len);
  return recv_all(fd, b.data(), len, deadline);
}

sockaddr_in resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc || !res)
    throw InvalidArgument("tcp bootstrap: cannot resolve host '" + host + "': " + gai_strerror(rc));
  sockaddr_in a;
  std::memcpy(&a, res->ai_addr, sizeof a);
  ::freeaddrinfo(res);
  a.sin_port = htons(port);
  return a;
}

std::string list_ranks(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t r : v) {
    if (!s.empty()) s += ", ";
    s += std::to_string(r);
  }
  return s;
}

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size, double timeout_s)
      : rank_(rank), size_(size), timeout_(std::chrono::duration<double>(timeout_s)),
        where_(host + ":" + std::to_string(port)) {
    if (rank_ == 0)
      serve(resolve(host, port));
    else
      join(resolve(host, port));
  }
  ~TcpBootstrap() override {
    for (int fd : peers_)
      if (fd >= 0) ::close(fd);
    if (to_root_ >= 0) ::close(to_root_);
  }

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }

  std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine) override {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    std::vector<std::vector<uint8_t>> all(size_);
    if (rank_ != 0) {
      if (auto e = send_frame(to_root_, mine, deadline); !e.empty()) fail_root("sending its contribution", e);
      for (uint32_t r = 0; r < size_; ++r)
        if (auto e = recv_frame(to_root_, all[r], deadline); !e.empty())
          fail_root("waiting for the allgather result (rank " + std::to_string(r) + "'s entry)", e);
      return all;
    }
    all[0] = mine;
    // Gather: poll all peers at once so one slow rank does not hide the others.
    std::vector<bool> got(size_, false);
    got[0] = true;
    uint32_t missing = size_ - 1;
    while (missing) {
      std::vector<pollfd> fds;
      std::vector<uint32_t> who;
      for (uint32_t r = 1; r < size_; ++r)
        if (!got[r]) {
          fds.push_back({peers_[r], POLLIN, 0});
          who.push_back(r);
        }
      int rc = ::poll(fds.data(), fds.size(), ms_left(deadline));
      if (rc < 0 && errno != EINTR) throw TransportError("tcp bootstrap: poll failed: " + errstr(errno));
      for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        uint32_t r = who[i];
        if (auto e = recv_frame(peers_[r], all[r], deadline); !e.empty())
          throw TransportError("tcp bootstrap " + where_ + ": rank 0 lost rank " + std::to_string(r) +
                               " during allgather: " + e);
        got[r] = true;
        --missing;
      }
      if (missing && Clock::now() >= deadline) {
        std::vector<uint32_t> late;
        for (uint32_t r = 1; r < size_; ++r)
          if (!got[r]) late.push_back(r);
        throw TimeoutError("tcp bootstrap " + where_ + ": allgather timed out after " + secs() +
                           "; no contribution from rank(s) " + list_ranks(late) + " of " + std::to_string(size_));
      }
    }
    for (uint32_t r = 1; r < size_; ++r)
      for (uint32_t k = 0; k < size_; ++k)
        if (auto e = send_frame(peers_[r], all[k], deadline); !e.empty())
          throw TransportError("tcp bootstrap " + where_ + ": rank 0 could not send the allgather result to rank " +
                               std::to_string(r) + ": " + e);
    return all;
  }

 private:
  std::string secs() const { return std::to_string(timeout_.count()) + " s"; }
  [[noreturn]] void fail_root(const std::string& what, const std::string& e) {
    std::string m = "tcp bootstrap " + where_ + ": rank " + std::to_string(rank_) + " " + what + " from rank 0: " + e;
    if (e.find("timed out") != std::string::npos) throw TimeoutError(m + " (after " + secs() + ")");
    throw TransportError(m);
  }

  void serve(const sockaddr_in& addr) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) throw TransportError("tcp bootstrap: socket failed: " + errstr(errno));
    int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) || ::listen(lfd, 256)) {
      int e = errno;
      ::close(lfd);
      throw TransportError("tcp bootstrap: rank 0 cannot listen on " + where_ + ": " + errstr(e));
    }
    peers_.assign(size_, -1);
    uint32_t joined = 1;
    std::string rejected;
    while (joined < size_) {
      if (!wait_fd(lfd, POLLIN, deadline)) break;
      int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Hello h{};
      std::string e = recv_all(fd, &h, sizeof h, deadline);
      // A bad hello (stranger, wrong size, duplicate rank) is dropped and remembered for the error.
      if (e.empty() && (h.magic != kMagic || h.size != size_ || h.rank == 0 || h.rank >= size_ || peers_[h.rank] >= 0))
        e = "bad hello (magic " + std::to_string(h.magic) + ", rank " + std::to_string(h.rank) + ", size " +
            std::to_string(h.size) + ")";
      if (!e.empty()) {
        rejected += " [rejected a connection: " + e + "]";
        ::close(fd);
        continue;
      }
      peers_[h.rank] = fd;
      ++joined;
    }
    ::close(lfd);
    if (joined < size_) {
      std::vector<uint32_t> missing;
      for (uint32_t r = 1; r < size_; ++r)
        if (peers_[r] < 0) missing.push_back(r);
      throw TimeoutError("tcp bootstrap " + where_ + ": rank(s) " + list_ranks(missing) + " of " +
                         std::to_string(size_) + " never joined within " + secs() + rejected);
    }
  }

  void join(const sockaddr_in& addr) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    std::string last = "no attempt";
    while (true) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) throw TransportError("tcp bootstrap: socket failed: " + errstr(errno));
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Hello h{kMagic, rank_, size_};
        if (auto e = send_all(fd, &h, sizeof h, deadline); !e.empty()) {
          ::close(fd);
          fail_root("sending its hello", e);
        }
        to_root_ = fd;
        return;
      }
      last = errstr(errno);
      ::close(fd);
      // Rank 0 may not be listening yet: retry until the deadline.
      if (Clock::now() >= deadline)
        throw TimeoutError("tcp bootstrap: rank " + std::to_string(rank_) + " could not reach rank 0 at " + where_ +
                           " within " + secs() + " (last error: " + last + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  uint32_t rank_, size_;
  std::chrono::duration<double> timeout_;
  std::string where_;
  std::vector<int> peers_;  // rank 0: socket per peer rank
  int to_root_ = -1;        // other ranks: socket to rank 0
};

}  // namespace

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size,
                                              double timeout_s) {
  if (size == 0 || rank >= size)
    throw InvalidArgument("tcp bootstrap: rank " + std::to_string(rank) + " not in [0, " + std::to_string(size) + ")");
  if (port == 0) throw InvalidArgument("tcp bootstrap: port 0 (rank 0 must serve on a known port)");
  if (!(timeout_s > 0)) throw InvalidArgument("tcp bootstrap: timeout_s must be > 0");
  return std::make_unique<TcpBootstrap>(host, port, rank, size, timeout_s);
}

}  // namespace anyep::transport
