// anyep bench ht — the HT (high-throughput, intranode) dispatch/combine benchmark at DeepEP's shape
// with its SM sweep and NCCL all_to_all baseline (bench/ht/bench_ht.py: torch and a GPU; with one
// GPU its processes share it and the figures are no bandwidth claim), reported in the CLI's table,
// JSON and plot.
#include <cstdlib>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "common/parse.h"
#include "python_bench.h"
#include "report.h"

namespace anyep::cli {
namespace {

constexpr const char* kScript = "bench/ht/bench_ht.py";  // python_bench.h finds it

const Command& ht_command() {
  // The script's place (installed share/anyep/bench, or the source checkout): python_bench.h.
  static const std::string footer =
      "exit status: 0 done, 1 failed, 2 bad command line, 77 cannot run here (needs a GPU,\n"
      "python3 with torch, and the script)\n" +
      bench_script_note(kScript);
  static const Command c{
      "anyep bench ht [options]",
      "HT dispatch (BF16 and FP8) and combine across the GPUs of this machine (one process per GPU; two\n"
      "processes sharing GPU 0 where there is one), over an SM sweep, against an NCCL all_to_all dispatcher\n"
      "measured in the same run (one process per GPU only): runs bench/ht/bench_ht.py (python3 with torch)\n"
      "and reports rank 0's GB/s here, counted as DeepEP counts them.",
      with_output_options({{"--processes", "N", "ranks, 1..16 [one per GPU; 2 sharing one GPU]"},
                           {"--tokens", "N", "tokens per rank, 1..65536 [4096]"},
                           {"--hidden", "H", "hidden size, 128..16384 [7168]"},
                           {"--topk", "K", "experts per token, 1..16 [8]"},
                           {"--experts", "E", "experts, 2..4096 [256]"},
                           {"--sms", "N", "the SM count of the headline figures, 2..1024 [24]"},
                           {"--sweep", "LIST", "SM counts to sweep, comma list [4,8,12,16,20,24,32,48,64]"},
                           {"--iters", "N", "timed calls per point, 1..100000 [50]"},
                           {"--warmup", "N", "warm-up calls per point, 0..100000 [20]"},
                           {"--no-nccl", nullptr, "skip the NCCL baseline"},
                           {"--timeout-s", "S", "the whole run, seconds (0, 86400] [900]"}},
                          "plot GB/s against SMs for each operation (needs python3 with matplotlib)"),
      footer.c_str()};
  return c;
}

// bench_ht.py's JSON -> "SMs<TAB>op GB/s..." rows of rank 0 by SM count, then one NCCL row.
constexpr const char* kToTable = R"PY(
import json, sys
d = json.load(open(sys.argv[1]))
t = d["table"]
ops = list(t)
sms = sorted({int(s) for op in ops for s in t[op]})
with open(sys.argv[2], "w") as f:
    f.write("\t".join(["SMs"] + [op + " GB/s" for op in ops]) + "\n")
    for s in sms:
        f.write("\t".join([str(s)] + [repr(float(t[op][str(s)]["rank0"])) if str(s) in t[op] else "nan" for op in ops]) + "\n")
    if d.get("nccl"):
        f.write("\t".join(["NCCL"] + [repr(float(d["nccl"][op]["rank0"])) for op in ops]) + "\n")
)PY";

}  // namespace

int bench_ht(int argc, char** argv, int first) {
  const Command& cmd = ht_command();
  OutputOptions out;
  std::vector<std::string> pass;  // options handed to bench_ht.py
  double timeout_s = 900;
  const auto each = [&](const std::string& a, const std::string& v) {
    auto pass_count = [&](uint64_t lo, uint64_t hi) {
      pass.push_back(a);
      pass.push_back(std::to_string(parse_count(a, v, lo, hi)));
    };
    if (a == "--processes") pass_count(1, 16);
    if (a == "--tokens") pass_count(1, 65536);
    if (a == "--hidden") pass_count(128, 16384);
    if (a == "--topk") pass_count(1, 16);
    if (a == "--experts") pass_count(2, 4096);
    if (a == "--sms") pass_count(2, 1024);
    if (a == "--iters") pass_count(1, 100000);
    if (a == "--warmup") pass_count(0, 100000);
    if (a == "--sweep") {
      split_list(v, [](const std::string& s) { return std::to_string(parse_count("--sweep", s, 2, 1024)); });
      pass.push_back(a), pass.push_back(v);
    }
    if (a == "--no-nccl") pass.push_back(a);
    if (a == "--timeout-s") timeout_s = parse_seconds(a, v, 1e-3, 86400);
    read_output_option(out, a, v);
  };
  if (const auto rc = parse_command(cmd, argc, argv, first, "anyep bench ht", each)) return *rc;
  PythonBenchRun run;
  if (const int rc = run_python_bench("anyep bench ht", kScript, 1, pass, timeout_s, kToTable, &run)) return rc;
  Report r;
  r.bench = "ht";
  r.title = "HT dispatch/combine (bench/ht/bench_ht.py), rank 0's GB/s by SM count (DeepEP's counting)";
  for (size_t i = 0; i < pass.size(); ++i) {
    const bool flag = i + 1 >= pass.size() || pass[i + 1].rfind("--", 0) == 0;
    r.config.set(pass[i].substr(2), flag ? std::string("true") : pass[i + 1]);
    if (!flag) ++i;
  }
  r.results = Json::raw(run.raw_json.empty() ? "null" : run.raw_json);
  bool header = true;
  std::vector<Series> series;
  for (const std::vector<std::string>& f : table_cells(run.table)) {
    if (header) {
      r.table.columns = f;
      for (size_t i = 1; i < f.size(); ++i) series.push_back({f[i], {}, {}});
      header = false;
      continue;
    }
    std::vector<Json> row = {f[0]};
    for (size_t i = 1; i < f.size(); ++i) row.emplace_back(std::strtod(f[i].c_str(), nullptr));
    r.table.rows.push_back(row);
    if (f[0] == "NCCL") continue;  // the baseline row is not a point of the sweep
    for (size_t i = 1; i < f.size() && i - 1 < series.size(); ++i) {
      series[i - 1].x.emplace_back(std::strtod(f[0].c_str(), nullptr));
      series[i - 1].y.push_back(std::strtod(f[i].c_str(), nullptr));
    }
  }
  if (!series.empty()) r.plots.push_back(Plot{"HT dispatch and combine (rank 0)", "SMs", "GB/s", false, false, series});
  r.notes.push_back(
      "targets on 2 x H200 at 24 SMs (1.05x DeepEP V1 in its harness, docs/bench/ht.md): BF16 dispatch >= 357, FP8 >= "
      "258, combine >= 303 GB/s");
  return emit(r, out, join_args(argc, argv)) ? kExitOk : kExitFailed;
}

}  // namespace anyep::cli
