// anyep — the command-line tool: `anyep info`, `anyep bench ll|ht|proxy|transport`. Every
// subcommand answers -h/--help; see args.h for the exit statuses.
#include <cstdio>
#include <cstring>
#include <string>

#include "anyep/version.h"
#include "args.h"
#include "commands.h"

namespace {

constexpr const char* kHelp =
    "usage: anyep <command> [options]      (anyep <command> --help for each)\n"
    "\n"
    "commands:\n"
    "  info              this machine as anyep sees it: GPUs, NUMA, NICs, libfabric providers and what each\n"
    "                    guarantees, what the proxy emulates, the paths an LL Buffer would take\n"
    "  bench proxy       the CPU proxy pipeline across local processes (no GPU; the README's main job)\n"
    "  bench transport   the transport between two local processes: latency and bandwidth by message size\n"
    "  bench ll          LL dispatch/combine against an NCCL baseline (a GPU per rank, torch: bench_ll.py)\n"
    "  bench ht          high-throughput (intranode) dispatch/combine, SM sweep, NCCL baseline (needs a GPU)\n"
    "  version           the version\n"
    "\n"
    "every bench prints a results table; --json prints it as JSON on stdout, --plot FILE.png draws it\n"
    "bench ll|ht run Python scripts: installed ones (<prefix>/share/anyep/bench, next to <prefix>/bin/anyep),\n"
    "else those of the source checkout this binary was built from; each --help names the one it runs\n"
    "exit status: 0 ok, 1 failed, 2 bad command line, 77 cannot run here (no GPU, not built)\n";

constexpr const char* kBenchHelp =
    "usage: anyep bench ll|ht|proxy|transport [options]   (anyep bench <which> --help for each)\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace anyep::cli;
  if (argc < 2) {
    std::fputs(kHelp, stderr);
    return kExitUsage;
  }
  const std::string c = argv[1];
  if (c == "-h" || c == "--help" || c == "help") {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  if (c == "version" || c == "--version") {
    std::printf("anyep %s\n", ANYEP_VERSION_STRING);
    return kExitOk;
  }
  if (c == "info") return info(argc, argv, 2);
  if (c == "bench") {
    const std::string b = argc > 2 ? argv[2] : "";
    if (b == "-h" || b == "--help") {
      std::fputs(kBenchHelp, stdout);
      return kExitOk;
    }
    if (b == "proxy") return bench_proxy(argc, argv, 3, "anyep bench proxy");
    if (b == "transport") return bench_transport(argc, argv, 3);
    if (b == "ll") return bench_ll(argc, argv, 3);
    if (b == "ht") return bench_ht(argc, argv, 3);
    std::fprintf(stderr, "anyep bench: %s\n%s",
                 b.empty() ? "which benchmark? (ll, ht, proxy, transport)"
                           : ("unknown benchmark '" + b + "' (ll, ht, proxy, transport)").c_str(),
                 kBenchHelp);
    return kExitUsage;
  }
  std::fprintf(stderr, "anyep: unknown command '%s'\n%s", c.c_str(), kHelp);
  return kExitUsage;
}
