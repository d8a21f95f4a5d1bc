// anyep/tests/mp/transport/alltoall_check.h — the all-to-all exercise shared by the transport's
// multi-process tests: every rank writes `writes_per_peer` writes of seeded random sizes
// (0 B..max_bytes, log-uniform, the first of each pair 0 B and the second max_bytes) with
// immediates to every other rank, plus one immediate-only message per peer. Each rank checks
// every byte when the write's immediate arrives, that every immediate arrives exactly once with
// the right source rank, and that every local completion arrives exactly once. Even ranks post
// with post_write, odd ranks with post_writes (batches).
#pragma once

#include <cstdint>
#include <string>

#include "transport/bootstrap/bootstrap.h"

namespace anyep::mptest {

struct AlltoallSpec {
  uint32_t writes_per_peer = 4;
  uint64_t max_bytes = 4ull << 20;
  uint64_t seed = 1;
  double timeout_s = 60;
};

struct AlltoallStats {
  uint64_t bytes_received = 0;
  uint64_t imms_received = 0;
  uint64_t eagain = 0;  // backpressure returns seen while posting
};

// Throws std::runtime_error naming what was wrong or missing (rank, peer, write index).
AlltoallStats run_alltoall(transport::Transport& t, transport::Bootstrap& b, const AlltoallSpec& spec);

}  // namespace anyep::mptest
