#include "python_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "gpus.h"
#include "process.h"

namespace anyep::cli {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int run_python_bench(const char* prog, const std::string& script, int min_gpus, const std::vector<std::string>& args,
                     double timeout_s, const char* to_table, PythonBenchRun* out) {
  // What it needs, each refusal saying which is missing.
  std::string why;
  const std::vector<Gpu> gpus = list_gpus(&why);
  if (static_cast<int>(gpus.size()) < min_gpus) {
    std::fprintf(stderr, "%s: cannot run here: needs %d GPU%s, %zu visible%s%s\n", prog, min_gpus,
                 min_gpus == 1 ? "" : "s", gpus.size(), why.empty() ? "" : ": ", why.c_str());
    return kExitCannotRun;
  }
  const std::string path = std::string(ANYEP_SOURCE_DIR) + "/" + script;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "%s: cannot run here: %s is missing (run from the build of a source checkout)\n", prog,
                 path.c_str());
    return kExitCannotRun;
  }
  if (run_process({"python3", "-c", "import torch"}, 120, true, true, &why) != 0) {
    std::fprintf(stderr, "%s: cannot run here: python3 cannot import torch\n", prog);
    return kExitCannotRun;
  }
  const std::string raw = temp_file(".json"), tsv = temp_file(".tsv");
  std::vector<std::string> run = {"python3", path, "--json", raw};
  run.insert(run.end(), args.begin(), args.end());
  std::fprintf(stderr, "[%s] running %s (its progress and table follow on stderr)\n", prog, path.c_str());
  const int rc = run_process(run, timeout_s, true, false, &why);
  const int conv = rc == 0 ? run_process({"python3", "-c", to_table, raw, tsv}, 120, true, false, &why) : -1;
  out->raw_json = read_all(raw);
  out->table = read_all(tsv);
  ::unlink(raw.c_str());
  ::unlink(tsv.c_str());
  if (rc != 0 || conv != 0 || out->table.empty()) {
    const std::string what = rc != 0 ? (rc < 0 ? why : script + " exited with " + std::to_string(rc))
                                     : std::string("its results could not be read");
    std::fprintf(stderr, "%s: FAILED: %s\n", prog, what.c_str());
    return kExitFailed;
  }
  return kExitOk;
}

std::vector<std::vector<std::string>> table_cells(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, '\t');) f.push_back(c);
    if (!f.empty()) rows.push_back(f);
  }
  return rows;
}

}  // namespace anyep::cli
