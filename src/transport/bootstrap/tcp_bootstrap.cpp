// Built-in TCP rendezvous: a star around rank 0. Every peer keeps one socket to rank 0; an
// allgather is "everyone sends to rank 0, rank 0 sends everything back". Start-up only, so
// simplicity beats latency. Every blocking step is a poll() bounded by the caller's timeout.
//
// Joining: a rank connects and sends a Hello (magic, version, rank, size, the job's secret);
// rank 0 answers with a Verdict (welcome, or why it refused). Rank 0 accepts in a poll() loop
// where each pending connection has its own hello deadline, so one silent or forged client
// delays nobody; refusals are logged on stderr and listed in the timeout error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "common/env.h"
#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::transport {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x61657062;  // "aepb": guards against a stranger on the port
constexpr uint32_t kVersion = 2;         // 2: secret and verdict

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t rank;
  uint32_t size;
  char secret[kMaxBootstrapSecret];  // zero-padded
};
static_assert(sizeof(Hello) == 16 + kMaxBootstrapSecret, "Hello is a wire format");

// Rank 0's answer to a hello.
enum Verdict : uint32_t { kWelcome = 0x574c434d, kWrongSecret = 1, kWrongSize = 2, kRankTaken = 3, kBadRank = 4 };
constexpr size_t kMaxPending = 256;  // connections that have not sent a full hello yet

const char* verdict_text(uint32_t v) {
  switch (v) {
    case kWrongSecret:
      return "wrong bootstrap secret (ANYEP_BOOTSTRAP_SECRET / TcpBootstrapOptions::secret differ)";
    case kWrongSize:
      return "world size differs from rank 0's";
    case kRankTaken:
      return "another process already joined as this rank";
    case kBadRank:
      return "rank out of range";
    default:
      return "unknown verdict";
  }
}

std::string errstr(int e) { return std::string(std::strerror(e)); }

int ms_until(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms > 1000 ? 1000 : ms + 1);
}

// Waits until fd is ready for `events` or the deadline passes (false).
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms_until(deadline));
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
// The length is checked against the limit before anything is allocated.
std::string recv_frame(int fd, std::vector<uint8_t>& b, uint64_t max_bytes, Clock::time_point deadline) {
  uint64_t len = 0;
  std::string e = recv_all(fd, &len, sizeof len, deadline);
  if (!e.empty()) return e;
  if (len > max_bytes)
    return "refused a frame of " + std::to_string(len) + " bytes (limit " + std::to_string(max_bytes) +
           " bytes, TcpBootstrapOptions::max_frame_bytes)";
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

// Compares secrets without an early exit, so timing does not reveal the matching prefix.
bool same_secret(const char* a, const char* b) {
  unsigned char diff = 0;
  for (size_t i = 0; i < kMaxBootstrapSecret; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string peer_name(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)) return "?";
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size, const TcpBootstrapOptions& opt)
      : rank_(rank),
        size_(size),
        timeout_(std::chrono::duration<double>(opt.timeout_s)),
        hello_timeout_(std::chrono::duration<double>(opt.hello_timeout_s)),
        max_frame_(opt.max_frame_bytes),
        where_(host + ":" + std::to_string(port)) {
    std::memcpy(secret_, opt.secret.data(), opt.secret.size());
    if (rank_ == 0)
      serve(opt.listen_fd >= 0 ? opt.listen_fd : tcp_bootstrap_listen(host, port, nullptr));
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
    if (mine.size() > max_frame_)
      throw InvalidArgument("tcp bootstrap: rank " + std::to_string(rank_) + "'s allgather contribution of " +
                            std::to_string(mine.size()) + " bytes exceeds the frame limit of " +
                            std::to_string(max_frame_) + " bytes");
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    std::vector<std::vector<uint8_t>> all(size_);
    if (rank_ != 0) {
      if (auto e = send_frame(to_root_, mine, deadline); !e.empty()) fail_root("sending its contribution", e);
      for (uint32_t r = 0; r < size_; ++r)
        if (auto e = recv_frame(to_root_, all[r], max_frame_, deadline); !e.empty())
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
      int rc = ::poll(fds.data(), fds.size(), ms_until(deadline));
      if (rc < 0 && errno != EINTR) throw TransportError("tcp bootstrap: poll failed: " + errstr(errno));
      for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        uint32_t r = who[i];
        if (auto e = recv_frame(peers_[r], all[r], max_frame_, deadline); !e.empty())
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
  struct Pending {  // an accepted connection whose hello is not complete yet
    int fd;
    Clock::time_point deadline;
    Hello hello;
    size_t got;
  };

  std::string secs() const { return std::to_string(timeout_.count()) + " s"; }
  [[noreturn]] void fail_root(const std::string& what, const std::string& e) {
    std::string m = "tcp bootstrap " + where_ + ": rank " + std::to_string(rank_) + " " + what + " from rank 0: " + e;
    if (e.find("timed out") != std::string::npos) throw TimeoutError(m + " (after " + secs() + ")");
    throw TransportError(m);
  }

  // A refused or dropped connection: logged at once (someone may be probing the port) and kept for
  // the error that a missing rank causes.
  void refuse(Pending& p, const std::string& why, uint32_t verdict) {
    std::string m = "refused a connection from " + peer_name(p.fd) + ": " + why;
    std::fprintf(stderr, "anyep: tcp bootstrap %s: %s\n", where_.c_str(), m.c_str());
    rejected_ += " [" + m + "]";
    if (verdict) (void)!::send(p.fd, &verdict, sizeof verdict, MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(p.fd);
    p.fd = -1;
  }

  // Checks a complete hello; on success the connection becomes rank h.rank's.
  void judge(Pending& p) {
    const Hello& h = p.hello;
    const std::string claim = " (claims rank " + std::to_string(h.rank) + " of " + std::to_string(h.size) + ")";
    if (h.magic != kMagic || h.version != kVersion)
      return refuse(p, "not an anyep bootstrap hello of version " + std::to_string(kVersion), 0);
    if (!same_secret(h.secret, secret_)) return refuse(p, "wrong secret" + claim, kWrongSecret);
    if (h.size != size_) return refuse(p, "world size differs from " + std::to_string(size_) + claim, kWrongSize);
    if (h.rank == 0 || h.rank >= size_) return refuse(p, "rank out of range" + claim, kBadRank);
    if (peers_[h.rank] >= 0) return refuse(p, "rank " + std::to_string(h.rank) + " already joined" + claim, kRankTaken);
    uint32_t welcome = kWelcome;
    if (auto e = send_all(p.fd, &welcome, sizeof welcome, p.deadline); !e.empty())
      return refuse(p, "could not answer its hello: " + e + claim, 0);
    int one = 1;
    ::setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    peers_[h.rank] = p.fd;
    p.fd = -1;
  }

  void serve(int lfd) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    ::fcntl(lfd, F_SETFL, ::fcntl(lfd, F_GETFL) | O_NONBLOCK);
    peers_.assign(size_, -1);
    std::vector<Pending> pending;
    auto joined = [&] {
      uint32_t n = 1;
      for (uint32_t r = 1; r < size_; ++r) n += peers_[r] >= 0;
      return n;
    };
    while (joined() < size_ && Clock::now() < deadline) {
      std::vector<pollfd> fds{{lfd, POLLIN, 0}};
      Clock::time_point wake = deadline;
      for (const Pending& p : pending) {
        fds.push_back({p.fd, POLLIN, 0});
        wake = std::min(wake, p.deadline);
      }
      int rc = ::poll(fds.data(), fds.size(), ms_until(wake));
      if (rc < 0 && errno != EINTR) {
        int e = errno;
        ::close(lfd);
        throw TransportError("tcp bootstrap: poll failed: " + errstr(e));
      }
      for (size_t i = 1; rc > 0 && i < fds.size(); ++i) {
        Pending& p = pending[i - 1];
        if (!fds[i].revents) continue;
        ssize_t k = ::recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) {
          refuse(p, k == 0 ? "closed before its hello was complete" : "recv failed: " + errstr(errno), 0);
          continue;
        }
        p.got += static_cast<size_t>(k);
        if (p.got == sizeof(Hello)) judge(p);
      }
      const auto now = Clock::now();
      for (Pending& p : pending)
        if (p.fd >= 0 && now >= p.deadline)
          refuse(p, "sent no complete hello within " + std::to_string(hello_timeout_.count()) + " s", 0);
      std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
      if (rc > 0 && (fds[0].revents & POLLIN)) {
        while (true) {
          int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) break;  // EAGAIN: nobody else waiting (errors are the client's: it retries)
          Pending p{fd, std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(hello_timeout_)),
                    Hello{}, 0};
          if (pending.size() >= kMaxPending) {
            refuse(p, "too many connections without a hello", 0);
            continue;
          }
          pending.push_back(p);
        }
      }
    }
    for (Pending& p : pending) ::close(p.fd);
    ::close(lfd);
    if (joined() < size_) {
      std::vector<uint32_t> missing;
      for (uint32_t r = 1; r < size_; ++r)
        if (peers_[r] < 0) missing.push_back(r);
      throw TimeoutError("tcp bootstrap " + where_ + ": rank(s) " + list_ranks(missing) + " of " +
                         std::to_string(size_) + " never joined within " + secs() + rejected_);
    }
  }

  // Connects (non-blocking, bounded), sends the hello and waits for rank 0's verdict; retries
  // while rank 0 is not listening yet or drops the connection before answering.
  void join(const sockaddr_in& addr) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    std::string last = "no attempt";
    Hello h{};
    h.magic = kMagic;
    h.version = kVersion;
    h.rank = rank_;
    h.size = size_;
    std::memcpy(h.secret, secret_, sizeof h.secret);
    while (true) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) throw TransportError("tcp bootstrap: socket failed: " + errstr(errno));
      int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
      if (rc && errno == EINPROGRESS) {
        int err = ETIMEDOUT;
        socklen_t len = sizeof err;
        if (wait_fd(fd, POLLOUT, deadline)) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err ? -1 : 0;
      }
      if (rc == 0) {
        uint32_t verdict = 0;
        std::string e = send_all(fd, &h, sizeof h, deadline);
        if (e.empty()) e = recv_all(fd, &verdict, sizeof verdict, deadline);
        if (e.empty() && verdict == kWelcome) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          to_root_ = fd;
          return;
        }
        ::close(fd);
        if (e.empty())
          throw TransportError("tcp bootstrap " + where_ + ": rank 0 refused rank " + std::to_string(rank_) + ": " +
                               verdict_text(verdict));
        if (e.find("timed out") != std::string::npos) fail_root("joining (hello sent, no answer)", e);
        last = "rank 0 dropped the connection before answering the hello (" + e + ")";
      } else {
        last = errstr(errno);
        ::close(fd);
      }
      // Rank 0 may not be listening yet: retry until the deadline.
      if (Clock::now() >= deadline)
        throw TimeoutError("tcp bootstrap: rank " + std::to_string(rank_) + " could not reach rank 0 at " + where_ +
                           " within " + secs() + " (last error: " + last + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  uint32_t rank_, size_;
  std::chrono::duration<double> timeout_, hello_timeout_;
  uint64_t max_frame_;
  std::string where_;
  char secret_[kMaxBootstrapSecret] = {};
  std::string rejected_;    // rank 0: refused connections, for the timeout error
  std::vector<int> peers_;  // rank 0: socket per peer rank
  int to_root_ = -1;        // other ranks: socket to rank 0
};

}  // namespace

int tcp_bootstrap_listen(const std::string& host, uint16_t port, uint16_t* bound_port) {
  sockaddr_in addr = resolve(host, port);
  const std::string where = host + ":" + std::to_string(port);
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) throw TransportError("tcp bootstrap: socket failed: " + errstr(errno));
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof addr;
  if (::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) || ::listen(lfd, 256) ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len)) {
    int e = errno;
    ::close(lfd);
    throw TransportError("tcp bootstrap: rank 0 cannot listen on " + where + ": " + errstr(e));
  }
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  return lfd;
}

std::string make_bootstrap_secret() {
  std::random_device rd;  // the kernel's random source (getrandom / /dev/urandom) on Linux
  std::string s;
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 8; ++k, v >>= 4) s += hex[v & 15];
  }
  return s;
}

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size,
                                              const TcpBootstrapOptions& opt) {
  if (size == 0 || rank >= size)
    throw InvalidArgument("tcp bootstrap: rank " + std::to_string(rank) + " not in [0, " + std::to_string(size) + ")");
  if (port == 0 && !(rank == 0 && opt.listen_fd >= 0))
    throw InvalidArgument("tcp bootstrap: port 0 (rank 0 must serve on a known port, or be given listen_fd)");
  if (!(opt.timeout_s > 0) || !(opt.timeout_s <= 86400))
    throw InvalidArgument("tcp bootstrap: timeout_s must be in (0, 86400] s, got " + std::to_string(opt.timeout_s));
  if (!(opt.hello_timeout_s > 0) || !(opt.hello_timeout_s <= 3600))
    throw InvalidArgument("tcp bootstrap: hello_timeout_s must be in (0, 3600] s, got " +
                          std::to_string(opt.hello_timeout_s));
  if (opt.max_frame_bytes == 0) throw InvalidArgument("tcp bootstrap: max_frame_bytes must be > 0");
  if (opt.secret.size() > kMaxBootstrapSecret)
    throw InvalidArgument("tcp bootstrap: the secret has " + std::to_string(opt.secret.size()) + " bytes, at most " +
                          std::to_string(kMaxBootstrapSecret) + " are allowed");
  return std::make_unique<TcpBootstrap>(host, port, rank, size, opt);
}

std::unique_ptr<Bootstrap> make_tcp_bootstrap(const std::string& host, uint16_t port, uint32_t rank, uint32_t size,
                                              double timeout_s) {
  TcpBootstrapOptions opt;
  opt.timeout_s = timeout_s;
  opt.secret = env::get_secret("ANYEP_BOOTSTRAP_SECRET");
  return make_tcp_bootstrap(host, port, rank, size, opt);
}

}  // namespace anyep::transport
