// anyep/src/kernels/common/error_record.h — the error record every kernel reports into, and the
// codes both modes share. LL's codes (ll/kernels.h) and HT's (ht/kernels.h) number the rest.
#pragma once

#include <cstdint>

namespace anyep {

// Codes common to both modes.
enum CommonErrorCode : uint32_t {
  kErrNone = 0,
  kErrRingTimeout = 7,  // a proxy ring stayed full (proxy stalled or stopped)
};

// Error record in pinned host memory mapped into the GPU. A kernel that times out fills it in
// (first error wins) and returns instead of trapping; the runtime raises it on the next call.
struct alignas(32) ErrorRecord {
  uint32_t code;   // error code; written last
  uint32_t claim;  // first reporter wins
  int32_t rank;    // reporting rank
  int32_t expert;  // global expert (or -1); the HT rail exchange puts the node here
  int32_t peer;    // rank that was waited for (or -1)
  int32_t value;   // e.g. count expected/observed
  int32_t pad[2];
};
static_assert(sizeof(ErrorRecord) == 32, "ErrorRecord is 32 bytes");

}  // namespace anyep
