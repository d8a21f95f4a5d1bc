/* C callers of the C API for the C++ tests: an int passed where the API takes an enum (c_caller.h). */
#include "c_caller.h"

const char* c_caller_status_name(int32_t status) { return anyep_status_name(status); }

anyep_status_t c_caller_handle_create(anyep_group_t group, int32_t mode, const anyep_tensor_t* topk_idx,
                                      anyep_handle_t* handle) {
  return anyep_handle_create(group, mode, topk_idx, NULL, NULL, handle);
}
