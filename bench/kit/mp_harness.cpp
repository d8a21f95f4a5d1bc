#include "bench/kit/mp_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>

namespace anyep::benchkit {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kBeatEvery = std::chrono::milliseconds(100);

// Anonymous shared memory (no /dev/shm file): one heartbeat counter per rank.
using Beat = std::atomic<uint64_t>;
static_assert(Beat::is_always_lock_free, "heartbeats cross processes: lock-free atomics only");

Beat* map_beats(uint32_t n) {
  void* p = ::mmap(nullptr, sizeof(Beat) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error("run_ranks: mmap of the heartbeat page: " + std::string(std::strerror(errno)));
  Beat* b = static_cast<Beat*>(p);
  for (uint32_t r = 0; r < n; ++r) new (b + r) Beat(0);
  return b;
}

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= size_t(k);
  }
  return true;
}

[[noreturn]] void child_main(Rank& r, const std::function<void(Rank&)>& fn, const RunOptions& opt, int wfd,
                             Beat* beats) {
  // A heartbeat the parent watches: it stops when the whole process stops (SIGSTOP, a stall).
  std::thread([beats, rank = r.rank] {
    while (true) {
      beats[rank].fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(kBeatEvery);
    }
  }).detach();
  // Exit codes: 0 ok, 1 failed, 2 skipped. The pipe gets {message length, result length}, both.
  int code = 0;
  std::string msg;
  try {
    if (opt.bootstrap) r.boot = r.join(opt.bootstrap_timeout_s);
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
  if (code) r.result.clear();
  uint64_t head[2] = {msg.size(), r.result.size()};
  if (!write_all(wfd, head, sizeof head) || !write_all(wfd, msg.data(), msg.size()) ||
      !write_all(wfd, r.result.data(), r.result.size()))
    code = code ? code : 1;
  ::close(wfd);
  ::_exit(code);  // no atexit handlers, no gtest teardown in the child
}

// Reads what is there without blocking; false at end of file (or error).
bool read_some(int fd, std::string& into) {
  char buf[65536];
  while (true) {
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k > 0) {
      into.append(buf, static_cast<size_t>(k));
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    return k < 0 && errno == EAGAIN;
  }
}

// The process state letter and its meaning from /proc/<pid>/stat ("T (stopped)").
std::string proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  size_t at = line.rfind(')');
  if (at == std::string::npos || at + 2 >= line.size()) return "unknown";
  char c = line[at + 2];
  const char* what = c == 'T'   ? "stopped"
                     : c == 't' ? "traced"
                     : c == 'D' ? "uninterruptible sleep"
                     : c == 'R' ? "running"
                     : c == 'S' ? "sleeping"
                     : c == 'Z' ? "zombie"
                                : "?";
  return std::string(1, c) + " (" + what + ")";
}

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of its pipe; -1 after end of file
  std::string bytes;
  bool done = false;
  uint64_t last_beat = 0;
  Clock::time_point beat_seen;
};
}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGSTOP:
      return "SIGSTOP";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(sig);
  }
}

std::vector<std::string> shm_files_of(pid_t pid, bool remove) {
  std::vector<std::string> out;
  const std::string prefix = std::to_string(pid) + ":";  // libfabric shm: "<pid>:<endpoint>:<n>"
  DIR* d = ::opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (remove) ::unlink(("/dev/shm/" + name).c_str());
    out.push_back("/dev/shm/" + name);
  }
  ::closedir(d);
  return out;
}

std::unique_ptr<transport::Bootstrap> Rank::join(double timeout_s) {
  transport::TcpBootstrapOptions o;
  o.timeout_s = timeout_s;
  o.secret = secret;
  if (rank == 0) {
    if (listen_fd < 0) throw std::runtime_error("Rank::join: rank 0 already joined (its bootstrap socket is gone)");
    o.listen_fd = listen_fd;
    listen_fd = -1;
  }
  return transport::make_tcp_bootstrap("127.0.0.1", port, rank, size, o);
}

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
  if (n == 0) throw std::runtime_error("run_ranks: no ranks");
  uint16_t port = 0;
  const int lfd = transport::tcp_bootstrap_listen("127.0.0.1", 0, &port);  // bound before any rank starts
  const std::string secret = transport::make_bootstrap_secret();
  Beat* beats = map_beats(n);
  std::vector<Child> kids(n);
  RunResult res;
  res.ranks.resize(n);
  const pid_t parent = ::getpid();
  const auto t0 = Clock::now();
  std::fflush(nullptr);  // children must not re-flush the parent's buffered output
  for (uint32_t r = 0; r < n; ++r) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC)) throw std::runtime_error("run_ranks: pipe: " + std::string(std::strerror(errno)));
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("run_ranks: fork: " + std::string(std::strerror(errno)));
    if (pid == 0) {
      // Die with the parent; if it already died before prctl, getppid() shows the new reaper.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(125);
      ::close(p[0]);
      for (uint32_t k = 0; k < r; ++k) ::close(kids[k].fd);  // the earlier ranks' read ends
      Rank me;
      me.rank = r;
      me.size = n;
      me.port = port;
      me.secret = secret;
      if (r == 0)
        me.listen_fd = lfd;
      else
        ::close(lfd);
      child_main(me, fn, opt, p[1], beats);
    }
    ::close(p[1]);
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    kids[r].pid = pid;
    kids[r].fd = p[0];
    kids[r].beat_seen = Clock::now();
    res.ranks[r].rank = r;
    res.ranks[r].pid = pid;
  }
  ::close(lfd);  // rank 0 holds it now
  if (opt.on_started) {
    std::vector<pid_t> pids;
    for (const Child& c : kids) pids.push_back(c.pid);
    opt.on_started(pids);
  }

  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.timeout_s));
  const auto liveness = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.liveness_s));
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.kill_grace_s));
  Clock::time_point kill_at = Clock::time_point::max();
  uint32_t alive = n;
  auto set_culprit = [&](uint32_t r, const std::string& what) {
    if (res.culprit >= 0) return;
    res.culprit = static_cast<int>(r);
    res.culprit_message = "rank " + std::to_string(r) + " (pid " + std::to_string(kids[r].pid) + ") " + what;
    res.seconds_to_culprit = std::chrono::duration<double>(Clock::now() - t0).count();
    kill_at = Clock::now() + grace;
  };
  // Ends rank r's bookkeeping once it is reaped: parse its pipe, set its outcome.
  auto reaped = [&](uint32_t r, int st) {
    Child& c = kids[r];
    c.done = true;
    --alive;
    if (c.fd >= 0) {
      read_some(c.fd, c.bytes);  // it exited: everything it wrote is in the pipe
      ::close(c.fd);
      c.fd = -1;
    }
    RankOutcome& o = res.ranks[r];
    uint64_t head[2] = {0, 0};
    const bool framed = c.bytes.size() >= sizeof head && (std::memcpy(head, c.bytes.data(), sizeof head),
                                                          c.bytes.size() == sizeof head + head[0] + head[1]);
    if (framed) {
      o.message = c.bytes.substr(sizeof head, head[0]);
      o.result = c.bytes.substr(sizeof head + head[0]);
    }
    if (WIFEXITED(st)) {
      const int code = WEXITSTATUS(st);
      o.status = code == 0   ? RankOutcome::Status::kOk
                 : code == 2 ? RankOutcome::Status::kSkipped
                             : RankOutcome::Status::kFailed;
      if (code == 0 && !framed)
        o.status = RankOutcome::Status::kFailed, o.message = "returned, but its report is incomplete";
      if (code != 0 && code != 1 && code != 2) o.message = "exited with code " + std::to_string(code) + " " + o.message;
      if (o.status == RankOutcome::Status::kFailed && opt.kill_all_on_failure) set_culprit(r, "failed: " + o.message);
    } else if (WIFSIGNALED(st) && o.status != RankOutcome::Status::kStalled &&
               o.status != RankOutcome::Status::kKilled) {
      o.status = RankOutcome::Status::kCrashed;
      o.message = "killed by signal " + std::to_string(WTERMSIG(st)) + " (" + signal_name(WTERMSIG(st)) + ")";
      set_culprit(r, "was " + o.message);
    }
    if (res.culprit >= 0 && static_cast<uint32_t>(res.culprit) != r && o.status == RankOutcome::Status::kFailed)
      o.message = "(after " + res.culprit_message + ") " + o.message;
    if (o.status != RankOutcome::Status::kOk && o.status != RankOutcome::Status::kSkipped)
      for (auto& f : shm_files_of(c.pid, true)) res.shm_removed.push_back(f);
  };
  auto kill_and_reap = [&](uint32_t r, RankOutcome::Status status, const std::string& why) {
    ::kill(kids[r].pid, SIGKILL);  // also ends a stopped process
    int st = 0;
    while (::waitpid(kids[r].pid, &st, 0) < 0 && errno == EINTR) {
    }
    res.ranks[r].status = status;  // before reaped(): a rank the harness killed is no crash
    reaped(r, st);
    res.ranks[r].message = why;
  };

  while (alive) {
    std::vector<pollfd> fds;
    std::vector<uint32_t> who;
    for (uint32_t r = 0; r < n; ++r)
      if (!kids[r].done && kids[r].fd >= 0) fds.push_back({kids[r].fd, POLLIN, 0}), who.push_back(r);
    ::poll(fds.data(), fds.size(), 20);  // also the tick for exits and heartbeats
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents) {
        Child& c = kids[who[i]];
        if (!read_some(c.fd, c.bytes)) ::close(c.fd), c.fd = -1;
      }
    for (uint32_t r = 0; r < n; ++r) {
      if (kids[r].done) continue;
      int st = 0;
      if (::waitpid(kids[r].pid, &st, WNOHANG) == kids[r].pid) reaped(r, st);
    }
    const auto now = Clock::now();
    for (uint32_t r = 0; r < n; ++r) {
      Child& c = kids[r];
      if (c.done) continue;
      const uint64_t b = beats[r].load(std::memory_order_relaxed);
      if (b != c.last_beat) {
        c.last_beat = b;
        c.beat_seen = now;
      } else if (now - c.beat_seen > liveness) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(now - c.beat_seen).count());
        const std::string what = "stopped responding: no heartbeat for " + std::string(secs) + " s (process state " +
                                 proc_state(c.pid) + ")";
        set_culprit(r, what);
        kill_and_reap(r, RankOutcome::Status::kStalled, what + "; killed");
      }
    }
    if (alive && now >= kill_at) {
      for (uint32_t r = 0; r < n; ++r)
        if (!kids[r].done)
          kill_and_reap(r, RankOutcome::Status::kKilled, "killed by the harness after " + res.culprit_message);
    }
    if (alive && now >= deadline) {
      for (uint32_t r = 0; r < n; ++r)
        if (!kids[r].done)
          kill_and_reap(r, RankOutcome::Status::kKilled,
                        "still running after " + std::to_string(opt.timeout_s) + " s: killed (straggler)");
    }
  }
  ::munmap(beats, sizeof(Beat) * n);
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
    if (r.status == RankOutcome::Status::kSkipped)
      any = true;
    else if (r.status != RankOutcome::Status::kOk)
      return false;
  }
  return any;
}

std::string RunResult::skip_reason() const {
  for (const auto& r : ranks)
    if (r.status == RankOutcome::Status::kSkipped) return "rank " + std::to_string(r.rank) + " skipped: " + r.message;
  return "";
}

std::string RunResult::summary() const {
  static const char* names[] = {"ok", "FAILED", "skipped", "KILLED", "CRASHED", "STALLED"};
  std::string s;
  if (culprit >= 0) s += "culprit: " + culprit_message + "\n";
  for (const auto& r : ranks)
    if (r.status != RankOutcome::Status::kOk)
      s += "rank " + std::to_string(r.rank) + " " + names[static_cast<int>(r.status)] + ": " + r.message + "\n";
  for (const auto& f : shm_removed) s += "removed " + f + " (left by a dead rank)\n";
  return s.empty() ? "all ranks ok" : s;
}

}  // namespace anyep::benchkit
