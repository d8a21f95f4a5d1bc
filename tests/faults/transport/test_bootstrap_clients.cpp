// Hostile clients on the TCP bootstrap's port: a forged hello (wrong secret, or
// a rank already joined), a silent connection and an oversized frame. Each is refused and named,
// and never delays or breaks the real ranks. Ranks are threads here; the sockets are real.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::transport {
namespace {

using Clock = std::chrono::steady_clock;

// The hello's wire format (tcp_bootstrap.cpp), written by hand as a forger would.
std::vector<uint8_t> hello_bytes(uint32_t rank, uint32_t size, const std::string& secret) {
  std::vector<uint8_t> b(16 + kMaxBootstrapSecret, 0);
  const uint32_t head[4] = {0x61657062, 2, rank, size};
  std::memcpy(b.data(), head, sizeof head);
  std::memcpy(b.data() + 16, secret.data(), secret.size());
  return b;
}

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) throw std::runtime_error("connect failed");
  return fd;
}

// Reads rank 0's 4-byte verdict (0 when the connection closed first or nothing came in time).
uint32_t read_verdict(int fd, int timeout_ms = 5000) {
  pollfd p{fd, POLLIN, 0};
  uint32_t v = 0;
  if (::poll(&p, 1, timeout_ms) == 1 && ::recv(fd, &v, sizeof v, MSG_WAITALL) == sizeof v) return v;
  return 0;
}

TcpBootstrapOptions options(const std::string& secret, double timeout_s = 10) {
  TcpBootstrapOptions o;
  o.secret = secret;
  o.timeout_s = timeout_s;
  return o;
}

struct Root {  // rank 0 on a pre-bound port, in a thread
  uint16_t port = 0;
  std::future<std::unique_ptr<Bootstrap>> boot;
  Root(uint32_t size, TcpBootstrapOptions o) {
    o.listen_fd = tcp_bootstrap_listen("127.0.0.1", 0, &port);
    boot =
        std::async(std::launch::async, [p = port, size, o] { return make_tcp_bootstrap("127.0.0.1", p, 0, size, o); });
  }
};

TEST(BootstrapClients, ForgedHelloWithTheWrongSecretIsRefusedAndTheRealRankStillJoins) {
  testing::internal::CaptureStderr();
  Root root(2, options("job-secret"));
  int forger = connect_to(root.port);
  auto h = hello_bytes(1, 2, "guess");
  ASSERT_EQ(::send(forger, h.data(), h.size(), 0), static_cast<ssize_t>(h.size()));
  EXPECT_EQ(read_verdict(forger), 1u) << "expected the wrong-secret verdict";
  ::close(forger);
  // A rank built with the wrong secret learns why at once (no retrying until the timeout).
  try {
    make_tcp_bootstrap("127.0.0.1", root.port, 1, 2, options("other"));
    ADD_FAILURE() << "a hello with the wrong secret was accepted";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong bootstrap secret"), std::string::npos) << e.what();
  }
  auto real = make_tcp_bootstrap("127.0.0.1", root.port, 1, 2, options("job-secret"));
  auto zero = root.boot.get();
  std::thread t([&] { zero->barrier(); });
  real->barrier();
  t.join();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("wrong secret (claims rank 1 of 2)"), std::string::npos) << log;
}

TEST(BootstrapClients, SecondHelloForAJoinedRankIsRefused) {
  testing::internal::CaptureStderr();
  Root root(3, options("s"));
  auto one = make_tcp_bootstrap("127.0.0.1", root.port, 1, 3, options("s"));
  try {
    make_tcp_bootstrap("127.0.0.1", root.port, 1, 3, options("s"));
    ADD_FAILURE() << "a second rank 1 was accepted";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("already joined"), std::string::npos) << e.what();
  }
  auto two = make_tcp_bootstrap("127.0.0.1", root.port, 2, 3, options("s"));
  auto zero = root.boot.get();
  std::thread a([&] { zero->barrier(); }), b([&] { one->barrier(); });
  two->barrier();
  a.join();
  b.join();
  EXPECT_NE(testing::internal::GetCapturedStderr().find("rank 1 already joined"), std::string::npos);
}

// A silent client must not hold up the ranks behind it: with a blocking accept-then-read, rank 1
// would wait out the silent client's whole hello deadline (3 s here).
TEST(BootstrapClients, SilentConnectionDelaysNobody) {
  TcpBootstrapOptions o = options("s");
  o.hello_timeout_s = 3;
  Root root(3, o);
  int silent = connect_to(root.port);  // connects first, never says anything
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = Clock::now();
  auto one = make_tcp_bootstrap("127.0.0.1", root.port, 1, 3, options("s"));
  auto two = make_tcp_bootstrap("127.0.0.1", root.port, 2, 3, options("s"));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0) << "ranks waited behind the silent client";
  auto zero = root.boot.get();
  ::close(silent);
}

// ... and is dropped (and logged) once its own hello deadline passes, before the job is complete.
TEST(BootstrapClients, SilentConnectionIsDroppedAtItsHelloDeadline) {
  testing::internal::CaptureStderr();
  TcpBootstrapOptions o = options("s");
  o.hello_timeout_s = 0.3;
  Root root(2, o);
  int silent = connect_to(root.port);
  pollfd p{silent, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the silent connection was not closed within 5 s";
  char c;
  EXPECT_LE(::recv(silent, &c, 1, 0), 0);  // closed without a verdict
  ::close(silent);
  auto one = make_tcp_bootstrap("127.0.0.1", root.port, 1, 2, options("s"));  // the real rank still joins
  auto zero = root.boot.get();
  EXPECT_NE(testing::internal::GetCapturedStderr().find("sent no complete hello within"), std::string::npos);
}

TEST(BootstrapClients, OversizedFrameIsRefusedNotAllocated) {
  TcpBootstrapOptions o = options("s");
  o.max_frame_bytes = 1 << 20;
  Root root(2, o);
  int fd = connect_to(root.port);
  auto h = hello_bytes(1, 2, "s");
  ASSERT_EQ(::send(fd, h.data(), h.size(), 0), static_cast<ssize_t>(h.size()));
  ASSERT_EQ(read_verdict(fd), 0x574c434du) << "expected the welcome";
  auto zero = root.boot.get();
  const uint64_t len = uint64_t{1} << 40;  // 1 TiB: must be refused before any allocation
  ASSERT_EQ(::send(fd, &len, sizeof len, 0), static_cast<ssize_t>(sizeof len));
  try {
    zero->allgather({1, 2, 3});
    ADD_FAILURE() << "a 1 TiB frame was accepted";
  } catch (const TransportError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("refused a frame of 1099511627776 bytes"), std::string::npos) << m;
  }
  ::close(fd);
  // The sender side refuses to send what the receivers would refuse.
  EXPECT_THROW(zero->allgather(std::vector<uint8_t>((1 << 20) + 1)), InvalidArgument);
}

TEST(BootstrapClients, BadOptionsAreRefused) {
  TcpBootstrapOptions o = options(std::string(kMaxBootstrapSecret + 1, 'x'));
  EXPECT_THROW(make_tcp_bootstrap("127.0.0.1", 1, 1, 2, o), InvalidArgument);
  o = options("s", -1);
  EXPECT_THROW(make_tcp_bootstrap("127.0.0.1", 1, 1, 2, o), InvalidArgument);
  o = options("s");
  o.hello_timeout_s = 0;
  EXPECT_THROW(make_tcp_bootstrap("127.0.0.1", 1, 1, 2, o), InvalidArgument);
}

}  // namespace
}  // namespace anyep::transport
