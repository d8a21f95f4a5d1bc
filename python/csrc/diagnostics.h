// anyep/python/csrc/diagnostics.h — ANYEP_LL_TRACE for the extension: one flushed stderr line per
// step of a call (a crash names the last step reached) and a native backtrace on a fatal signal.
#pragma once

namespace anyep::ext {

// Turns the trace on and installs the SIGSEGV/SIGBUS/SIGABRT handler (called once at import).
void install_diagnostics();
// One line "anyep._C trace: <call>: <what>" when the trace is on; nothing otherwise.
void ll_trace(const char* call, const char* what);

}  // namespace anyep::ext
