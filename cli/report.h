// anyep/cli/report.h — what every benchmark of the CLI hands back: a results table (printed),
// the same as JSON (--json), plots (--plot FILE.png, drawn by matplotlib where it is installed),
// and progress lines on stderr for long runs.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "json.h"

namespace anyep::cli {

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<Json>> rows;
};

struct Series {
  std::string name;
  std::vector<Json> x;  // numbers (a line over x), or strings (bars by category)
  std::vector<double> y;
};

struct Plot {
  std::string title, x_label, y_label;
  bool x_log = false, y_log = false;
  std::vector<Series> series;
};

struct Report {
  std::string bench;  // "proxy", "transport", "ll"
  std::string title;  // one line above the table
  Json config = Json::object();
  Table table;
  std::vector<std::string> notes;  // lines under the table
  std::vector<Plot> plots;
  Json results = Json::object();  // everything measured, raw
  bool ok = true;
};

// The output options every benchmark takes (--json, --plot FILE.png).
struct OutputOptions {
  bool json = false;
  std::string plot;
};

// Checked before a run: --plot needs python3 with matplotlib. Throws InvalidArgument saying what
// is missing.
void check_plot_available();

// `own` options followed by --json and --plot (`plot_help`: what the plot shows).
std::vector<OptionSpec> with_output_options(std::vector<OptionSpec> own, const char* plot_help);
// Takes --json / --plot into `out` (checking that a plot can be drawn); false for other options.
bool read_output_option(OutputOptions& out, const std::string& option, const std::string& value);

// Prints the table (stdout, or stderr with --json), the JSON document (stdout, with --json) and
// writes the plot (--plot). `command` is the command line. Returns false if the plot failed.
bool emit(const Report& r, const OutputOptions& out, const std::string& command);

// Where human-readable lines go: stdout, or stderr when stdout carries JSON.
FILE* human(const OutputOptions& out);

// Progress lines on stderr ("[anyep bench proxy] 12 s: ..."), every `every_s` seconds, from a
// thread, while a long phase runs; stop() (or the destructor) ends it.
class Ticker {
 public:
  Ticker(std::string prefix, std::string what, double every_s = 5);
  ~Ticker();
  void stop();

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The command line as one string (argv joined by spaces).
std::string join_args(int argc, char** argv);

// Machine description for results: host name, CPU model, cores.
Json machine_json();

}  // namespace anyep::cli
