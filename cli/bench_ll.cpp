// anyep bench ll — the LL dispatch/combine benchmark with its NCCL all_to_all baseline
// (bench/ll/bench_ll.py: torch and a GPU per rank), reported in the CLI's table, JSON and plot.
#include <cstdlib>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "common/error.h"
#include "common/parse.h"
#include "gpus.h"
#include "python_bench.h"
#include "report.h"

namespace anyep::cli {
namespace {

constexpr const char* kScript = "bench/ll/bench_ll.py";  // python_bench.h finds it

const Command& ll_command() {
  // The script's place (installed share/anyep/bench, or the source checkout): python_bench.h.
  static const std::string footer =
      "exit status: 0 done, 1 failed, 2 bad command line, 77 cannot run here (needs a GPU per rank,\n"
      "python3 with torch, and the script)\n" +
      bench_script_note(kScript);
  static const Command c{
      "anyep bench ll [options]",
      "LL dispatch (FP8) and combine (BF16) across the GPUs of this machine, a rank per GPU, one Buffer per LL\n"
      "path, against an NCCL all_to_all dispatcher measured in the same run: runs bench/ll/bench_ll.py (python3\n"
      "with torch) and reports its medians here.",
      with_output_options(
          {{"--ranks", "N", "processes, one per GPU, 1..64 [every visible GPU]"},
           {"--tokens", "N", "tokens per rank, 1..8192 [128]"},
           {"--hidden", "H", "hidden size, 128..16384 [7168]"},
           {"--topk", "K", "experts per token, 1..16 [8]"},
           {"--experts", "E", "experts, 2..4096 [288]"},
           {"--iters", "N", "measured iterations, 1..100000 [500]"},
           {"--warmup", "N", "warm-up iterations, 0..100000 [50]"},
           {"--paths", "LIST", "LL paths to measure: auto, proxy-cuda-ipc, proxy-libfabric (comma list) [auto]"},
           {"--timeout-s", "S", "the whole run, seconds (0, 86400] [900]"}},
          "plot dispatch and combine times by path (needs python3 with matplotlib)"),
      footer.c_str()};
  return c;
}

// bench_ll.py's JSON -> "metric<TAB>rank 0<TAB>rank 1..." lines of its numeric results.
constexpr const char* kToTable = R"PY(
import json, sys
res = json.load(open(sys.argv[1]))["results"]
ranks = sorted(res, key=int)
keys = []
for r in ranks:
    keys += [k for k, v in res[r].items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in keys]
with open(sys.argv[2], "w") as f:
    f.write("\t".join(["metric"] + ["rank " + r for r in ranks]) + "\n")
    for k in keys:
        f.write("\t".join([k] + [repr(float(res[r][k])) if k in res[r] else "nan" for r in ranks]) + "\n")
)PY";

}  // namespace

int bench_ll(int argc, char** argv, int first) {
  const Command& cmd = ll_command();
  OutputOptions out;
  std::vector<std::string> pass;  // options handed to bench_ll.py
  double timeout_s = 900;
  int ranks = 1;  // GPUs needed: --ranks, else whatever is visible (at least one)
  const auto each = [&](const std::string& a, const std::string& v) {
    auto pass_count = [&](uint64_t lo, uint64_t hi) {
      const uint64_t n = parse_count(a, v, lo, hi);
      pass.push_back(a);
      pass.push_back(std::to_string(n));
      return n;
    };
    if (a == "--ranks") ranks = static_cast<int>(pass_count(1, 64));
    if (a == "--tokens") pass_count(1, 8192);
    if (a == "--hidden") pass_count(128, 16384);
    if (a == "--topk") pass_count(1, 16);
    if (a == "--experts") pass_count(2, 4096);
    if (a == "--iters") pass_count(1, 100000);
    if (a == "--warmup") pass_count(0, 100000);
    if (a == "--paths") {
      split_list(v, [](const std::string& p) {
        return parse_choice("--paths", p, {"auto", "proxy-cuda-ipc", "proxy-libfabric"});
      });
      pass.push_back(a), pass.push_back(v);
    }
    if (a == "--timeout-s") timeout_s = parse_seconds(a, v, 1e-3, 86400);
    read_output_option(out, a, v);
  };
  if (const auto rc = parse_command(cmd, argc, argv, first, "anyep bench ll", each)) return *rc;
  PythonBenchRun run;
  if (const int rc = run_python_bench("anyep bench ll", kScript, ranks, pass, timeout_s, kToTable, &run)) return rc;
  Report r;
  r.bench = "ll";
  r.title = "LL dispatch/combine (bench/ll/bench_ll.py), medians in us (GB/s where named), by rank";
  for (size_t i = 0; i + 1 < pass.size(); i += 2) r.config.set(pass[i].substr(2), pass[i + 1]);
  r.results = Json::raw(run.raw_json.empty() ? "null" : run.raw_json);
  bool header = true;
  Plot plot{"LL dispatch and combine (rank 0)", "path", "us", false, false, {}};
  Series dispatch{"dispatch", {}, {}}, combine{"combine", {}, {}};
  for (const std::vector<std::string>& f : table_cells(run.table)) {
    if (header) {
      r.table.columns = f;
      header = false;
      continue;
    }
    std::vector<Json> row = {f[0]};
    for (size_t i = 1; i < f.size(); ++i) row.emplace_back(std::strtod(f[i].c_str(), nullptr));
    r.table.rows.push_back(row);
    // "auto:dispatch_us" / "nccl_dispatch_us": rank 0's times by path for the plot.
    const double v = f.size() > 1 ? std::strtod(f[1].c_str(), nullptr) : 0;
    const std::string& k = f[0];
    const size_t colon = k.find(':');
    const std::string path = colon == std::string::npos ? "NCCL all_to_all" : k.substr(0, colon);
    const std::string metric = colon == std::string::npos ? k.substr(5) : k.substr(colon + 1);
    if (metric == "dispatch_us") dispatch.x.emplace_back(path), dispatch.y.push_back(v);
    if (metric == "combine_us") combine.x.emplace_back(path), combine.y.push_back(v);
  }
  plot.series = {dispatch, combine};
  if (!dispatch.y.empty()) r.plots.push_back(plot);
  r.notes.push_back(
      "DeepEP's kernels on H200s at the default shape, its own harness: 1 rank 18.1 / 21.4 us, 2 ranks 28.7 / 40.4 us, "
      "4 ranks 37.1 / 56.2 us (dispatch / combine; docs/bench/ll.md)");
  return emit(r, out, join_args(argc, argv)) ? kExitOk : kExitFailed;
}

}  // namespace anyep::cli
