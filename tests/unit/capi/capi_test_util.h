// Helpers shared by the C API's CPU tests (test_capi_errors.cpp, test_capi_ht_errors.cpp): a
// one-rank allgather, tensor descriptors of memory that is never touched (GPU-free calls only
// check descriptors), and the refusal check (status and message pieces).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "anyep/anyep.h"
#include "capi_calls.h"

namespace capi_test {

// One-rank allgather: the contribution is the result.
inline int self_allgather(const void* send, void* recv, size_t bytes, void*) {
  std::memcpy(recv, send, bytes);
  return 0;
}

// A GPU-free one-rank group of `mode`: E = L = 8 experts, T = 16 tokens, H = 256.
inline anyep_config_t one_rank_config(anyep_mode_t mode) {
  anyep_config_t c;
  anyep_config_init(&c);
  c.mode = mode;
  c.device = ANYEP_DEVICE_NONE;
  c.num_experts = 8;
  c.max_tokens_per_rank = 16;
  c.hidden = 256;
  c.bootstrap.kind = ANYEP_BOOTSTRAP_ALLGATHER;
  c.bootstrap.allgather = self_allgather;
  return c;
}

alignas(256) inline unsigned char g_fake[64];
inline anyep_tensor_t tensor(anyep_dtype_t dtype, std::vector<int64_t> shape, int32_t device = 0) {
  anyep_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = g_fake;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) t.shape[d] = shape[d];
  t.device = device;
  return t;
}

// Expects `got` == `want` and the thread's last error to contain every piece of `text`.
inline ::testing::AssertionResult refused(anyep_status_t got, anyep_status_t want, std::vector<std::string> text) {
  if (got != want)
    return ::testing::AssertionFailure() << "status " << anyep_status_name(got) << ", expected "
                                         << anyep_status_name(want) << " (last error: " << anyep_get_last_error()
                                         << ")";
  const std::string msg = anyep_get_last_error();
  for (const std::string& t : text)
    if (msg.find(t) == std::string::npos)
      return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << t << "'";
  return ::testing::AssertionSuccess();
}

}  // namespace capi_test
