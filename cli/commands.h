// anyep/cli/commands.h — the subcommands of the `anyep` program (cli/main.cpp). Each takes the
// whole argv and the index of its first own argument, prints its help on -h/--help, and returns
// the process exit status (args.h: 0 ok, 1 failed, 2 bad command line, 77 cannot run here).
#pragma once

#include <functional>
#include <memory>

#include "transport/factory.h"

namespace anyep::cli {

// Makes one endpoint of a rank of `bench proxy`'s multi-process run.
using EndpointMaker = std::function<std::unique_ptr<transport::Transport>(const transport::TransportSpec&)>;

int info(int argc, char** argv, int first);
// `prog` names the command in the usage line ("anyep bench proxy", or "anyep_main" for the alias).
// `make_endpoint`: transport::make_transport for `anyep`; anyep_main in a TSan build (the tests run
// it) passes the testkit's TSan-aware maker (testkit/tsan_transport.h).
int bench_proxy(int argc, char** argv, int first, const char* prog,
                const EndpointMaker& make_endpoint = transport::make_transport);
int bench_transport(int argc, char** argv, int first);
int bench_ll(int argc, char** argv, int first);
int bench_ht(int argc, char** argv, int first);

}  // namespace anyep::cli
