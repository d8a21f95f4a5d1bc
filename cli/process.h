// anyep/cli/process.h — running another program (python3 for plots and the LL benchmark).
#pragma once

#include <string>
#include <vector>

namespace anyep::cli {

// Runs argv[0] (searched in PATH) with argv and waits for it, at most timeout_s (then it is killed
// and -1 returned with *why saying so). stdout goes to stderr when `stdout_to_stderr` (the CLI's
// stdout may carry JSON), and is discarded with `quiet` (stderr too). Returns the exit status,
// 128 + signal when killed by one, or -1 when it could not start (*why says why).
int run_process(const std::vector<std::string>& argv, double timeout_s, bool stdout_to_stderr, bool quiet,
                std::string* why);

// A fresh temporary file name (created empty, under $TMPDIR or /tmp) with `suffix`.
std::string temp_file(const std::string& suffix);

}  // namespace anyep::cli
