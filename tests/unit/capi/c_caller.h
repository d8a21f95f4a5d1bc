/* What a C caller may do and C++ may not: pass any int where the API takes an enum (C converts
 * it). In C++ an out-of-range enum value is undefined, and so is calling through a pointer cast to
 * take an int (a call through the wrong function type: UBSan's -fsanitize=function); these C
 * functions (c_caller.c) make the call for the C++ tests. */
#ifndef ANYEP_TEST_C_CALLER_H
#define ANYEP_TEST_C_CALLER_H

#include <stdint.h>

#include "anyep/anyep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* anyep_status_name(status) with status's bits, whatever they are. */
const char* c_caller_status_name(int32_t status);
/* anyep_handle_create(group, mode, topk_idx, NULL, NULL, handle) with mode's bits, whatever they are. */
anyep_status_t c_caller_handle_create(anyep_group_t group, int32_t mode, const anyep_tensor_t* topk_idx,
                                      anyep_handle_t* handle);

#ifdef __cplusplus
}
#endif
#endif /* ANYEP_TEST_C_CALLER_H */
