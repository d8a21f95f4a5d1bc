// anyep_main — the README's main job under its old name: the same program as `anyep bench proxy`
// (cli/bench_proxy.cpp), kept as an alias while scripts and docs move to the `anyep` CLI.
#include "cli/commands.h"

int main(int argc, char** argv) { return anyep::cli::bench_proxy(argc, argv, 1, "anyep_main"); }
