// anyep/cli/python_bench.h — running one of the Python benchmarks (bench/ll/bench_ll.py,
// bench/ht/bench_ht.py: they hold the NCCL baselines) for `anyep bench ll|ht`: the checks of what it
// needs (GPUs, python3 with torch, the script), the run with its JSON, and that JSON turned into a
// tab-separated table by a converter the command supplies.
//
// The scripts are found next to the binary first (an installed <prefix>/bin/anyep runs
// <prefix>/share/anyep/bench/...: `cmake --install` puts them there), then in the source checkout
// the binary was built from (a build tree). They import the anyep package of that build, or the
// installed one (pip install ./python).
#pragma once

#include <string>
#include <vector>

namespace anyep::cli {

struct PythonBenchRun {
  std::string raw_json;  // what the script wrote with --json
  std::string table;     // the converter's output: a header line, then rows, tab-separated
};

// Where `script` ("bench/ll/bench_ll.py") is looked for, in order.
std::vector<std::string> bench_script_places(const std::string& script);
// The first place that holds it, "" when none does.
std::string find_bench_script(const std::string& script);
// "script: <path>\n", or which places were looked at: for the command's --help and its refusal.
std::string bench_script_note(const std::string& script);

// Runs `python3 <found script> --json F <args>` under `timeout_s`, then `python3 -c <to_table> F T`.
// Returns an exit status (args.h): kExitCannotRun with the reason on stderr when fewer than
// `min_gpus` GPUs are visible, torch cannot be imported or the script is missing; kExitFailed when
// the run or the conversion failed; kExitOk with `*out` filled.
int run_python_bench(const char* prog, const std::string& script, int min_gpus, const std::vector<std::string>& args,
                     double timeout_s, const char* to_table, PythonBenchRun* out);

// Splits the converter's table into lines of cells.
std::vector<std::vector<std::string>> table_cells(const std::string& table);

}  // namespace anyep::cli
