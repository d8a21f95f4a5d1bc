// anyep_main — the README's main job under its old name: the same program as `anyep bench proxy`
// (cli/bench_proxy.cpp), kept as an alias while scripts and docs move to the `anyep` CLI. The
// tests run it (tests/mp/main, tests/faults), also under TSan: there its endpoints model the NIC's
// reads so that TSan can follow them (testkit/tsan_transport.h; bench/CMakeLists.txt).
#include "cli/commands.h"
#ifdef ANYEP_MAIN_TSAN_ENDPOINTS
#include "testkit/tsan_transport.h"
#endif

int main(int argc, char** argv) {
#ifdef ANYEP_MAIN_TSAN_ENDPOINTS
  return anyep::cli::bench_proxy(argc, argv, 1, "anyep_main", anyep::testkit::make_tsan_aware_transport);
#else
  return anyep::cli::bench_proxy(argc, argv, 1, "anyep_main");
#endif
}
