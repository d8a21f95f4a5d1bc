// anyep/cli/python_bench.h — running one of the repository's Python benchmarks (bench/ll/bench_ll.py,
// bench/ht/bench_ht.py: they hold the NCCL baselines) for `anyep bench ll|ht`: the checks of what it
// needs (GPUs, python3 with torch, the script in the source checkout), the run with its JSON, and
// that JSON turned into a tab-separated table by a converter the command supplies.
#pragma once

#include <string>
#include <vector>

namespace anyep::cli {

struct PythonBenchRun {
  std::string raw_json;  // what the script wrote with --json
  std::string table;     // the converter's output: a header line, then rows, tab-separated
};

// Runs `python3 <source>/<script> --json F <args>` under `timeout_s`, then `python3 -c <to_table> F T`.
// Returns an exit status (args.h): kExitCannotRun with the reason on stderr when fewer than
// `min_gpus` GPUs are visible, torch cannot be imported or the script is missing; kExitFailed when
// the run or the conversion failed; kExitOk with `*out` filled.
int run_python_bench(const char* prog, const std::string& script, int min_gpus, const std::vector<std::string>& args,
                     double timeout_s, const char* to_table, PythonBenchRun* out);

// Splits the converter's table into lines of cells.
std::vector<std::vector<std::string>> table_cells(const std::string& table);

}  // namespace anyep::cli
