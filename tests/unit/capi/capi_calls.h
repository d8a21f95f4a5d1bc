/* The C API's handle calls with their arguments in a row, for tests that make many calls with a
 * few arguments changed: each helper fills the mode's args struct and calls the mode-generic
 * function (anyep_handle_create, anyep_dispatch, anyep_combine). C99 and C++: the C++ unit and
 * multi-process tests and the C round trip (tests/gpu/capi) share it. */
#ifndef ANYEP_TESTS_CAPI_CALLS_H
#define ANYEP_TESTS_CAPI_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "anyep/anyep.h"

static inline anyep_status_t ll_create(anyep_group_t g, const anyep_tensor_t* topk_idx, anyep_handle_t* h) {
  return anyep_handle_create(g, ANYEP_MODE_LL, topk_idx, NULL, NULL, h);
}

static inline anyep_status_t ht_create(anyep_group_t g, const anyep_tensor_t* topk_idx,
                                       const anyep_ht_options_t* options, anyep_stream_t stream, anyep_handle_t* h) {
  return anyep_handle_create(g, ANYEP_MODE_HT, topk_idx, options, stream, h);
}

static inline anyep_status_t ll_dispatch(anyep_handle_t h, const anyep_tensor_t* x, const anyep_tensor_t* recv_x,
                                         const anyep_tensor_t* recv_scales, const anyep_tensor_t* recv_count,
                                         uint32_t flags, anyep_stream_t stream) {
  anyep_dispatch_args_t a;
  anyep_dispatch_args_init(&a, ANYEP_MODE_LL);
  a.x = x;
  a.recv_x = recv_x;
  a.recv_scales = recv_scales;
  a.recv_count = recv_count;
  a.flags = flags;
  a.stream = stream;
  return anyep_dispatch(h, &a);
}

static inline anyep_status_t ll_combine(anyep_handle_t h, const anyep_tensor_t* x, const anyep_tensor_t* topk_weights,
                                        const anyep_tensor_t* out, uint32_t flags, anyep_stream_t stream) {
  anyep_combine_args_t a;
  anyep_combine_args_init(&a, ANYEP_MODE_LL);
  a.x = x;
  a.topk_weights = topk_weights;
  a.out = out;
  a.flags = flags;
  a.stream = stream;
  return anyep_combine(h, &a);
}

static inline anyep_status_t ht_dispatch(anyep_handle_t h, const anyep_tensor_t* x, const anyep_tensor_t* x_scales,
                                         const anyep_tensor_t* topk_weights, const anyep_tensor_t* recv_x,
                                         const anyep_tensor_t* recv_scales, const anyep_tensor_t* recv_topk_idx,
                                         const anyep_tensor_t* recv_topk_weights, anyep_stream_t stream) {
  anyep_dispatch_args_t a;
  anyep_dispatch_args_init(&a, ANYEP_MODE_HT);
  a.x = x;
  a.x_scales = x_scales;
  a.topk_weights = topk_weights;
  a.recv_x = recv_x;
  a.recv_scales = recv_scales;
  a.recv_topk_idx = recv_topk_idx;
  a.recv_topk_weights = recv_topk_weights;
  a.stream = stream;
  return anyep_dispatch(h, &a);
}

static inline anyep_status_t ht_combine(anyep_handle_t h, const anyep_tensor_t* x, const anyep_tensor_t* topk_weights,
                                        const anyep_tensor_t* out, const anyep_tensor_t* out_topk_weights,
                                        anyep_stream_t stream) {
  anyep_combine_args_t a;
  anyep_combine_args_init(&a, ANYEP_MODE_HT);
  a.x = x;
  a.topk_weights = topk_weights;
  a.out = out;
  a.out_topk_weights = out_topk_weights;
  a.stream = stream;
  return anyep_combine(h, &a);
}

#endif /* ANYEP_TESTS_CAPI_CALLS_H */
