#include "testkit/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "testkit/mp_harness.h"

extern char** environ;

namespace anyep::testkit {

namespace {

using Clock = std::chrono::steady_clock;

// Reads what is there on the child's pipes (waiting up to `ms`); false once both are at EOF.
bool read_some(ChildProcess& p, int ms) {
  pollfd fds[2] = {{p.out, POLLIN, 0}, {p.err, POLLIN, 0}};
  if (p.out < 0 && p.err < 0) return false;
  if (::poll(fds, 2, ms) <= 0) return true;
  char buf[4096];
  for (int i = 0; i < 2; ++i) {
    if (fds[i].fd < 0 || !fds[i].revents) continue;
    const ssize_t k = ::read(fds[i].fd, buf, sizeof buf);
    if (k > 0) {
      (i ? p.err_text : p.out_text).append(buf, size_t(k));
    } else if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) {
      ::close(fds[i].fd);
      (i ? p.err : p.out) = -1;
    }
  }
  return p.out >= 0 || p.err >= 0;
}

}  // namespace

std::string ChildProcess::describe_status() const {
  if (!exited) return "still running";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + signal_name(WTERMSIG(status)) + ")";
  return "ended with status " + std::to_string(status);
}

ChildProcess spawn_child(const std::string& path, const std::vector<std::string>& args,
                         const std::vector<std::string>& env) {
  // Everything the child needs is built before fork(): only async-signal-safe calls after it.
  for (const auto& kv : env)
    if (kv.find('=') == std::string::npos || kv[0] == '=')
      throw std::invalid_argument("spawn_child: environment entry '" + kv + "' is not NAME=value");
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    bool replaced = false;
    for (const auto& kv : env) replaced = replaced || v.compare(0, kv.find('=') + 1, kv, 0, kv.find('=') + 1) == 0;
    if (!replaced) vars.push_back(v);
  }
  vars.insert(vars.end(), env.begin(), env.end());
  std::vector<char*> envp, argv{const_cast<char*>(path.c_str())};
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int o[2], e[2];
  if (::pipe(o)) throw std::runtime_error(std::string("spawn_child: pipe failed: ") + std::strerror(errno));
  if (::pipe(e)) {
    ::close(o[0]), ::close(o[1]);
    throw std::runtime_error(std::string("spawn_child: pipe failed: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  ChildProcess p;
  p.started_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  p.pid = ::fork();
  if (p.pid < 0) {
    ::close(o[0]), ::close(o[1]), ::close(e[0]), ::close(e[1]);
    throw std::runtime_error(std::string("spawn_child: fork failed: ") + std::strerror(errno));
  }
  if (p.pid == 0) {
    ::dup2(o[1], 1);
    ::dup2(e[1], 2);
    ::close(o[0]), ::close(o[1]), ::close(e[0]), ::close(e[1]);
    ::execve(path.c_str(), argv.data(), envp.data());
    static const char msg[] = "spawn_child: execve failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(o[1]), ::close(e[1]);
  p.out = o[0], p.err = e[0];
  return p;
}

bool pump(ChildProcess& p, int ms) {
  if (p.exited) return true;
  read_some(p, ms);
  if (::waitpid(p.pid, &p.status, WNOHANG) != p.pid) return false;
  p.exited = true;
  p.seconds = double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count() -
                     p.started_ns) /
              1e9;
  // The rest of its output; a grandchild that inherited the pipes may keep them open: 2 s at most.
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until && read_some(p, 50)) {
  }
  if (p.out >= 0) ::close(p.out), p.out = -1;
  if (p.err >= 0) ::close(p.err), p.err = -1;
  return true;
}

bool wait_child(ChildProcess& p, double timeout_s) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!pump(p, 20))
    if (Clock::now() >= until) {
      ::kill(p.pid, SIGKILL);
      while (!pump(p, 20)) {
      }
      return false;
    }
  return true;
}

}  // namespace anyep::testkit
