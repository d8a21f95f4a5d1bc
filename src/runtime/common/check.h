// anyep/src/runtime/common/check.h — argument checks shared by the LL and HT call contracts: each throws
// InvalidArgument with a message that names the argument. Host code only.
#pragma once

#include <string>
#include <utility>

#include "common/error.h"
#include "runtime/common/tensor_ref.h"

namespace anyep::runtime {

// Throws InvalidArgument(msg()) unless ok. The message is built only on failure: these checks run
// on every call, and building each message eagerly cost microseconds of string work per call.
template <typename Msg>
void expect(bool ok, Msg&& msg) {
  if (!ok) throw InvalidArgument(msg());
}

// Present, of `dtype`, `ndim` dimensions, on the buffer's device, contiguous.
void expect_tensor(const TensorRef& t, const char* name, DType dtype, int ndim, int device);
// Absent, or a 1-D `dtype` tensor of `entries` entries (`what` names the count in the message).
void expect_optional(const TensorRef& t, const char* name, DType dtype, int64_t entries, const char* what, int device);
// An output against its spec: as expect_tensor, then shape, strides and the allocation behind it.
void expect_output(const TensorRef& t, const OutputSpec& s, const char* name, int device);

}  // namespace anyep::runtime
