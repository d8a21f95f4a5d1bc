#include "python_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
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

// The folder of this executable (/proc/self/exe), "" when unknown.
std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::vector<std::string> bench_script_places(const std::string& script) {
  std::vector<std::string> places;
  // Installed: <prefix>/bin/anyep finds <prefix>/share/anyep/<script> (cli/CMakeLists.txt installs it).
  if (const std::string dir = exe_dir(); !dir.empty()) places.push_back(dir + "/" ANYEP_DATA_FROM_BIN "/" + script);
  places.push_back(std::string(ANYEP_SOURCE_DIR) + "/" + script);  // the checkout this binary was built from
  return places;
}

std::string find_bench_script(const std::string& script) {
  for (const std::string& p : bench_script_places(script)) {
    if (!is_file(p)) continue;
    char real[PATH_MAX];  // "<prefix>/share/...", not "<prefix>/bin/../share/..."
    return ::realpath(p.c_str(), real) ? std::string(real) : p;
  }
  return "";
}

std::string bench_script_note(const std::string& script) {
  if (const std::string p = find_bench_script(script); !p.empty()) return "script: " + p + "\n";
  std::string s = "script: " + script + " not found; looked at:\n";
  for (const std::string& p : bench_script_places(script)) s += "  " + p + "\n";
  return s;
}

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
  const std::string path = find_bench_script(script);
  if (path.empty()) {
    std::fprintf(stderr, "%s: cannot run here: %s", prog, bench_script_note(script).c_str());
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
