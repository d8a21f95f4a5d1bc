#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.h"

extern char** environ;

namespace anyep::cli {

int run_process(const std::vector<std::string>& args, double timeout_s, bool stdout_to_stderr, bool quiet,
                std::string* why) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  } else if (stdout_to_stderr) {
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    if (why) *why = args[0] + ": " + std::strerror(rc);
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int st = 0;
    const pid_t got = waitpid(pid, &st, WNOHANG);
    if (got == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (got < 0) {
      if (why) *why = std::string("waitpid: ") + std::strerror(errno);
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      if (why) *why = args[0] + " ran past " + std::to_string(static_cast<int>(timeout_s)) + " s and was killed";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string temp_file(const std::string& suffix) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/anyep-XXXXXX" + suffix;
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back(0);
  const int fd = mkstemps(buf.data(), static_cast<int>(suffix.size()));
  if (fd < 0) throw InvalidArgument("cannot create a temporary file " + path + ": " + std::strerror(errno));
  close(fd);
  return std::string(buf.data());
}

}  // namespace anyep::cli
