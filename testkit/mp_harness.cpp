#include "testkit/mp_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace anyep::testkit {

namespace {
constexpr size_t kMaxMessage = 8192;  // below the pipe buffer: a child's write never blocks

void child_main(uint32_t rank, uint32_t n, uint16_t port, const std::function<void(Rank&)>& fn,
                const RunOptions& opt, int wfd) {
  // Exit codes: 0 ok, 1 failed, 2 skipped; the message goes through the pipe.
  int code = 0;
  std::string msg;
  try {
    Rank r;
    r.rank = rank;
    r.size = n;
    r.port = port;
    if (opt.bootstrap) r.boot = transport::make_tcp_bootstrap("127.0.0.1", port, rank, n, opt.bootstrap_timeout_s);
    fn(r);
  } catch (const Skip& s) {
    code = 2;
    msg = s.what();
  } catch (const std::exception& e) {
    code = 1;
    msg = e.what();
  } catch (...) {
    code = 1;
    msg = "unknown exception";
  }
  if (msg.size() > kMaxMessage) msg.resize(kMaxMessage);
  if (!msg.empty()) (void)!::write(wfd, msg.data(), msg.size());
  ::close(wfd);
  ::_exit(code);  // no atexit handlers, no gtest teardown in the child
}

std::string drain(int fd) {
  std::string s;
  char buf[4096];
  ssize_t k;
  while ((k = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(k));
  return s;
}
}  // namespace

uint16_t free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len))
    throw std::runtime_error("free_tcp_port: " + std::string(std::strerror(errno)));
  ::close(fd);
  return ntohs(a.sin_port);
}

RunResult run_ranks(uint32_t n, const std::function<void(Rank&)>& fn, const RunOptions& opt) {
  uint16_t port = free_tcp_port();
  std::vector<pid_t> pids(n, -1);
  std::vector<int> rfds(n, -1);
  RunResult res;
  res.ranks.resize(n);
  std::fflush(nullptr);  // children must not re-flush the parent's buffered output
  for (uint32_t r = 0; r < n; ++r) {
    int p[2];
    if (::pipe(p)) throw std::runtime_error("run_ranks: pipe: " + std::string(std::strerror(errno)));
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("run_ranks: fork: " + std::string(std::strerror(errno)));
    if (pid == 0) {
      ::close(p[0]);
      child_main(r, n, port, fn, opt, p[1]);
    }
    ::close(p[1]);
    pids[r] = pid;
    rfds[r] = p[0];
    res.ranks[r].rank = r;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt.timeout_s);
  uint32_t alive = n;
  std::vector<bool> done(n, false);
  while (alive) {
    for (uint32_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --alive;
      auto& o = res.ranks[r];
      o.message = drain(rfds[r]);
      if (WIFEXITED(st)) {
        int c = WEXITSTATUS(st);
        o.status = c == 0 ? RankOutcome::Status::kOk : c == 2 ? RankOutcome::Status::kSkipped : RankOutcome::Status::kFailed;
        if (c != 0 && c != 1 && c != 2) o.message = "exited with code " + std::to_string(c) + " " + o.message;
      } else {
        o.status = RankOutcome::Status::kCrashed;
        o.message = "killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ") " + o.message;
      }
    }
    if (!alive) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (uint32_t r = 0; r < n; ++r) {
        if (done[r]) continue;
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], nullptr, 0);
        res.ranks[r].status = RankOutcome::Status::kKilled;
        res.ranks[r].message = "still running after " + std::to_string(opt.timeout_s) + " s: killed (straggler)";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int fd : rfds) ::close(fd);
  return res;
}

bool RunResult::ok() const {
  for (const auto& r : ranks)
    if (r.status != RankOutcome::Status::kOk) return false;
  return !ranks.empty();
}

bool RunResult::skipped() const {
  bool any = false;
  for (const auto& r : ranks) {
    if (r.status == RankOutcome::Status::kSkipped) any = true;
    else if (r.status != RankOutcome::Status::kOk) return false;
  }
  return any;
}

std::string RunResult::skip_reason() const {
  for (const auto& r : ranks)
    if (r.status == RankOutcome::Status::kSkipped) return "rank " + std::to_string(r.rank) + " skipped: " + r.message;
  return "";
}

std::string RunResult::summary() const {
  static const char* names[] = {"ok", "FAILED", "skipped", "KILLED", "CRASHED"};
  std::string s;
  for (const auto& r : ranks)
    if (r.status != RankOutcome::Status::kOk)
      s += "rank " + std::to_string(r.rank) + " " + names[static_cast<int>(r.status)] + ": " + r.message + "\n";
  return s.empty() ? "all ranks ok" : s;
}

}  // namespace anyep::testkit
