// anyep/src/capi/collective.h — collective buffer creation: every rank builds its buffer and
// contributes its connection record, or the status and message of its failure, to one allgather,
// so that a rank that cannot create its buffer is named by all the others instead of leaving them
// waiting. CUDA-free; the backends pass what to build.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::capi {

// Runs `build` (which returns this rank's connection record) and allgathers the outcome. Throws
// this rank's own failure, or the first peer's (naming it and `what`), or returns every record.
inline std::vector<std::vector<uint8_t>> build_and_exchange(transport::Bootstrap& boot, const char* what,
                                                            const std::function<std::vector<uint8_t>()>& build) {
  constexpr uint8_t kOk = 1, kFailed = 0;  // a record's first byte
  std::vector<uint8_t> mine;
  std::exception_ptr local;
  try {
    const std::vector<uint8_t> info = build();
    mine.push_back(kOk);
    mine.insert(mine.end(), info.begin(), info.end());
  } catch (const Error& e) {
    local = std::current_exception();
    mine.assign({kFailed, static_cast<uint8_t>(e.status())});
    const std::string m = e.what();
    mine.insert(mine.end(), m.begin(), m.end());
  }
  // Every rank takes part even after a local failure, so the others fail at once naming it.
  const std::vector<std::vector<uint8_t>> all = boot.allgather(mine);
  if (local) std::rethrow_exception(local);
  std::vector<std::vector<uint8_t>> infos(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() >= 2 && all[r][0] == kFailed)
      throw Error(static_cast<anyep_status_t>(all[r][1]), "rank " + std::to_string(r) + " could not create its " +
                                                              what + ": " +
                                                              std::string(all[r].begin() + 2, all[r].end()));
    if (all[r].empty() || all[r][0] != kOk)
      throw InternalError("capi: rank " + std::to_string(r) + " sent a malformed " + what + " record");
    infos[r].assign(all[r].begin() + 1, all[r].end());
  }
  return infos;
}

}  // namespace anyep::capi
