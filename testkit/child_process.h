// anyep/testkit/child_process.h — run a program as a child process with its stdout and stderr
// captured, never waiting without a deadline: the tests of the main job (tests/mp/main) and the
// fault-injection suite (tests/faults) run anyep_main this way.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace anyep::testkit {

struct ChildProcess {
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends of its stdout and stderr (closed once it exited)
  std::string out_text, err_text;
  bool exited = false;
  int status = 0;            // waitpid status, once exited
  double seconds = 0;        // from spawn to exit, once exited
  long long started_ns = 0;  // steady clock at spawn

  // "exited with code N", "killed by signal N (SIGKILL)", or "still running".
  std::string describe_status() const;
};

// Starts `path` with `args` and this process's environment plus `env` ("NAME=value" entries,
// replacing a variable of the same name). Throws std::runtime_error if it cannot fork.
ChildProcess spawn_child(const std::string& path, const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {});

// Reads the child's output for up to `ms` milliseconds. Returns true once it has exited (then
// `status` is set and the rest of its output read: up to 2 s more if a grandchild still holds
// the pipes).
bool pump(ChildProcess& p, int ms);

// Pumps until the child exits or `timeout_s` passed; then kills it (SIGKILL) and reaps it.
// Returns true when it exited on its own.
bool wait_child(ChildProcess& p, double timeout_s);

}  // namespace anyep::testkit
