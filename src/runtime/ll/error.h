// anyep/src/runtime/ll/error.h — the text of an error an LL kernel recorded (kernels/ll/kernels.h,
// ErrorRecord): which rank gave up, on what, and the peer it waited for. Plain C++ (no CUDA): part
// of the runtime contract library, unit-tested on every machine.
#pragma once

#include <cstdint>

#include "kernels/ll/kernels.h"

namespace anyep::runtime {

// Returns for kErrNone. Otherwise throws: TimeoutError for a wait that gave up (the message names
// the reporting rank, the expert and the peer rank waited for), InvalidArgument for input the
// kernel refused (an expert out of range, more messages than tokens per rank). `code` is the
// record's code as read (acquire) by the caller; the other fields are read from `e`.
void raise_device_error(uint32_t code, const ll::ErrorRecord& e);

}  // namespace anyep::runtime
