#include "diagnostics.h"

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

namespace anyep::ext {
namespace {

// Off by default: no cost.
bool g_trace = false;

struct sigaction g_prev_action[3];
constexpr int kFatalSignals[3] = {SIGSEGV, SIGBUS, SIGABRT};

// Frames in this module print as _C...so(+offset): resolve them with
// addr2line -f -C -e <module> <offset>.
void on_fatal_signal(int sig, siginfo_t* info, void*) {
  char head[160];
  const int n = std::snprintf(head, sizeof(head), "anyep._C: fatal signal %d (fault address %p); native backtrace:\n",
                              sig, info ? info->si_addr : nullptr);
  if (n > 0) (void)!write(2, head, static_cast<size_t>(n));
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, 2);
  // Hand the signal on to the previous handler (Python's faulthandler prints the Python stack,
  // then the default action ends the process): restore it; the faulting instruction runs again.
  for (int i = 0; i < 3; ++i)
    if (kFatalSignals[i] == sig) sigaction(sig, &g_prev_action[i], nullptr);
  if (sig == SIGABRT) raise(sig);
}

}  // namespace

void ll_trace(const char* call, const char* what) {
  if (!g_trace) return;
  std::fprintf(stderr, "anyep._C trace: %s: %s\n", call, what);
  std::fflush(stderr);
}

void install_diagnostics() {
  g_trace = true;
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kFatalSignals[i], &sa, &g_prev_action[i]);
  ll_trace("module", "ANYEP_LL_TRACE on: step trace and native backtrace on fatal signals");
}

}  // namespace anyep::ext
