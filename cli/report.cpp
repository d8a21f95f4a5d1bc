#include "report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "anyep/version.h"
#include "common/error.h"
#include "process.h"

namespace anyep::cli {
namespace {

// Draws Report::plots: one panel per plot; numeric x as lines (log2 x when asked), string x as
// grouped bars.
constexpr const char* kPlotScript = R"PY(
import json, sys, textwrap
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
doc = json.load(open(sys.argv[1]))
plots = doc["plots"]
fig, axes = plt.subplots(len(plots), 1, figsize=(7.5, 4.2 * len(plots)), squeeze=False)
for ax, p in zip(axes[:, 0], plots):
    bars = any(isinstance(x, str) for s in p["series"] for x in s["x"])
    if bars:
        names = []
        for s in p["series"]:
            names += [x for x in s["x"] if x not in names]
        width = 0.8 / max(1, len(p["series"]))
        for i, s in enumerate(p["series"]):
            ax.bar([names.index(x) + i * width for x in s["x"]], s["y"], width, label=s["name"])
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))])
        ax.set_xticklabels(names, rotation=20, ha="right")
    else:
        for s in p["series"]:
            ax.plot(s["x"], s["y"], marker="o", label=s["name"])
        if p.get("x_log"):
            ax.set_xscale("log", base=2)
    if p.get("y_log"):
        ax.set_yscale("log")
    ax.set_title(p["title"])
    ax.set_xlabel(p["x_label"])
    ax.set_ylabel(p["y_label"])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle(textwrap.fill(doc.get("title", ""), 110), fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";

Json plots_json(const Report& r) {
  Json plots = Json::array();
  for (const Plot& p : r.plots) {
    Json j = Json::object();
    j.set("title", p.title);
    j.set("x_label", p.x_label);
    j.set("y_label", p.y_label);
    j.set("x_log", p.x_log);
    j.set("y_log", p.y_log);
    Json series = Json::array();
    for (const Series& s : p.series) {
      Json js = Json::object();
      js.set("name", s.name);
      Json xs = Json::array(), ys = Json::array();
      for (const Json& x : s.x) xs.push(x);
      for (double y : s.y) ys.push(y);
      js.set("x", xs);
      js.set("y", ys);
      series.push(js);
    }
    j.set("series", series);
    plots.push(j);
  }
  return plots;
}

void print_table(const Report& r, FILE* f) {
  const Table& t = r.table;
  const size_t n = t.columns.size();
  std::vector<size_t> w(n);
  std::vector<bool> numeric(n, false);  // right-aligned: the column holds numbers
  for (size_t c = 0; c < n; ++c) w[c] = t.columns[c].size();
  std::vector<std::vector<std::string>> cells;
  for (const auto& row : t.rows) {
    cells.emplace_back();
    for (size_t c = 0; c < row.size() && c < n; ++c) {
      cells.back().push_back(row[c].cell());
      w[c] = std::max(w[c], cells.back().back().size());
      numeric[c] = numeric[c] || row[c].kind() == Json::Kind::kNumber || row[c].kind() == Json::Kind::kInt;
    }
  }
  std::fprintf(f, "%s\n", r.title.c_str());
  auto line = [&](const std::vector<std::string>& v) {
    std::string s = " ";
    for (size_t c = 0; c < v.size(); ++c) {
      // Appended piecewise: GCC 12 -O3 warns (-Wrestrict, falsely) on "literal" + std::string.
      const std::string pad(w[c] > v[c].size() ? w[c] - v[c].size() : 0, ' ');
      s += ' ';
      s += numeric[c] ? pad : v[c];
      s += numeric[c] ? v[c] : pad;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::fprintf(f, "%s\n", s.c_str());
  };
  line(t.columns);
  std::vector<std::string> rule;
  for (size_t c = 0; c < n; ++c) rule.push_back(std::string(w[c], '-'));
  line(rule);
  for (const auto& row : cells) line(row);
  for (const std::string& note : r.notes) std::fprintf(f, "  %s\n", note.c_str());
  std::fflush(f);
}

}  // namespace

FILE* human(const OutputOptions& out) { return out.json ? stderr : stdout; }

void check_plot_available() {
  std::string why;
  const int rc = run_process({"python3", "-c", "import matplotlib"}, 60, true, true, &why);
  if (rc == 0) return;
  throw InvalidArgument("--plot needs python3 with matplotlib, which " +
                        (rc < 0 ? "could not be run (" + why + ")" : std::string("cannot import matplotlib here")) +
                        " (Debian: apt-get install python3-matplotlib)");
}

std::vector<OptionSpec> with_output_options(std::vector<OptionSpec> own, const char* plot_help) {
  own.push_back({"--json", nullptr, "print the results as one JSON document on stdout (the table goes to stderr)"});
  own.push_back({"--plot", "FILE.png", plot_help});
  return own;
}

bool read_output_option(OutputOptions& out, const std::string& option, const std::string& value) {
  if (option == "--json") {
    out.json = true;
  } else if (option == "--plot") {
    check_plot_available();
    out.plot = value;
  } else {
    return false;
  }
  return true;
}

bool emit(const Report& r, const OutputOptions& out, const std::string& command) {
  print_table(r, human(out));
  Json doc = Json::object();
  doc.set("anyep", ANYEP_VERSION_STRING);
  doc.set("bench", r.bench);
  doc.set("title", r.title);
  doc.set("command", command);
  doc.set("machine", machine_json());
  doc.set("ok", r.ok);
  doc.set("config", r.config);
  Json table = Json::object(), cols = Json::array(), rows = Json::array();
  for (const std::string& c : r.table.columns) cols.push(c);
  for (const auto& row : r.table.rows) {
    Json jr = Json::array();
    for (const Json& v : row) jr.push(v);
    rows.push(jr);
  }
  table.set("columns", cols);
  table.set("rows", rows);
  doc.set("table", table);
  doc.set("results", r.results);
  doc.set("plots", plots_json(r));
  if (out.json) std::fprintf(stdout, "%s\n", doc.dump().c_str());
  std::fflush(stdout);
  if (out.plot.empty()) return true;
  if (r.plots.empty()) {
    std::fprintf(stderr, "anyep: --plot: this run has nothing to plot\n");
    return false;
  }
  const std::string tmp = temp_file(".json");
  std::ofstream(tmp) << doc.dump();
  std::string why;
  const int rc = run_process({"python3", "-c", kPlotScript, tmp, out.plot}, 120, true, false, &why);
  ::unlink(tmp.c_str());
  if (rc != 0) {
    std::fprintf(stderr, "anyep: --plot %s: the plot failed (%s)\n", out.plot.c_str(),
                 rc < 0 ? why.c_str() : ("python3 exited with " + std::to_string(rc)).c_str());
    return false;
  }
  std::fprintf(human(out), "  plot: %s\n", out.plot.c_str());
  return true;
}

Ticker::Ticker(std::string prefix, std::string what, double every_s) {
  thread_ = std::thread([this, prefix, what, every_s] {
    const auto t0 = std::chrono::steady_clock::now();
    auto next = every_s;
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= next && !stop_.load()) {
        std::fprintf(stderr, "[%s] %.0f s: %s\n", prefix.c_str(), s, what.c_str());
        next += every_s;
      }
    }
  });
}

Ticker::~Ticker() { stop(); }

void Ticker::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string join_args(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

Json machine_json() {
  Json m = Json::object();
  utsname u{};
  uname(&u);
  m.set("host", u.nodename);
  m.set("kernel", std::string(u.sysname) + " " + u.release);
  std::string cpu = "unknown CPU";
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  m.set("cpu", cpu);
  m.set("online_cores", static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  return m;
}

}  // namespace anyep::cli
