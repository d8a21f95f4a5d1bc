#include "runtime/ll/error.h"

#include <string>

#include "common/error.h"

namespace anyep::runtime {

void raise_device_error(uint32_t code, const ll::ErrorRecord& e) {
  if (code == ll::kErrNone) return;
  using std::to_string;
  // Plain string concatenation: no iostreams in library code (docs/ll.md, "toolchain note").
  std::string m = "anyep LL: rank " + to_string(e.rank) + ": ";
  switch (code) {
    case ll::kErrDispatchRecvTimeout:
      m += "dispatch timed out waiting for the token count of expert " + to_string(e.expert) + " from rank " +
           to_string(e.peer);
      break;
    case ll::kErrCombineRecvTimeout:
      m += "combine timed out waiting for expert " + to_string(e.expert) + " (owned by rank " + to_string(e.peer) + ")";
      if (e.value >= 0) m += " needed by token " + to_string(e.value);
      break;
    case ll::kErrSendTimeout:
      m += "dispatch send timed out: this GPU's blocks did not finish the " + to_string(e.value) +
           " tokens for expert " + to_string(e.expert);
      break;
    case ll::kErrNoPeer:
      m += "rank " + to_string(e.peer) + " (expert " + to_string(e.expert) +
           ") has no direct path and this buffer has no proxy";
      break;
    case ll::kErrRingTimeout:
      m += "proxy ring " + to_string(e.value) + " stayed full while sending expert " + to_string(e.expert) +
           " to rank " + to_string(e.peer) + " (proxy stalled or stopped)";
      break;
    case ll::kErrBarrierTimeout:
      m += "the clean barrier timed out waiting for rank " + to_string(e.peer);
      break;
    case ll::kErrSlotOverflow:
      throw InvalidArgument(m + "more than num_max_dispatch_tokens_per_rank messages for expert " +
                            to_string(e.expert) +
                            ", or more top-k entries of one token on its rank than that rank has experts "
                            "(duplicate experts in a token's topk_idx?)");
    case ll::kErrBadExpert:
      throw InvalidArgument(m + "topk_idx holds expert " + to_string(e.expert) + " (token " + to_string(e.value) +
                            "), outside [-1, num_experts)");
    default:
      m += "unknown device error code " + to_string(code);
  }
  m += " (timeout ANYEP_TIMEOUT_S; call clean_low_latency_buffer or rebuild the Buffer)";
  throw TimeoutError(m);
}

}  // namespace anyep::runtime
