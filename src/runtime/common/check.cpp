#include "runtime/common/check.h"

#include <algorithm>

namespace anyep::runtime {

using std::to_string;

void expect_tensor(const TensorRef& t, const char* name, DType dtype, int ndim, int device) {
  expect(t.present(), [&] { return std::string(name) + " is missing"; });
  expect(t.dtype == dtype,
         [&] { return std::string(name) + " must be " + dtype_name(dtype) + ", got " + dtype_name(t.dtype); });
  expect(t.ndim == ndim, [&] {
    return std::string(name) + " must have " + to_string(ndim) + " dimensions, got shape " + shape_str(t);
  });
  expect(t.device == device,
         [&] { return std::string(name) + " must be a CUDA tensor on device " + to_string(device); });
  expect(t.contiguous(), [&] { return std::string(name) + " must be contiguous"; });
}

void expect_optional(const TensorRef& t, const char* name, DType dtype, int64_t entries, const char* what, int device) {
  if (!t.present()) return;
  expect_tensor(t, name, dtype, 1, device);
  expect(t.shape[0] == entries,
         [&] { return std::string(name) + " must have " + what + "=" + to_string(entries) + " entries"; });
}

void expect_output(const TensorRef& t, const OutputSpec& s, const char* name, int device) {
  expect(t.present(), [&] { return std::string(name) + " is missing"; });
  expect(t.dtype == s.dtype,
         [&] { return std::string(name) + " must be " + dtype_name(s.dtype) + ", got " + dtype_name(t.dtype); });
  expect(t.ndim == s.ndim, [&] {
    return std::string(name) + " must have " + to_string(s.ndim) + " dimensions, got shape " + shape_str(t);
  });
  expect(t.device == device,
         [&] { return std::string(name) + " must be a CUDA tensor on device " + to_string(device); });
  expect(std::equal(s.shape, s.shape + s.ndim, t.shape),
         [&] { return std::string(name) + " must have shape " + dims_str(s.shape, s.ndim) + ", got " + shape_str(t); });
  bool strides_ok = true;
  for (int d = 0; d < s.ndim; ++d) strides_ok = strides_ok && (s.shape[d] <= 1 || t.strides[d] == s.strides[d]);
  expect(strides_ok, [&] {
    return std::string(name) + " must have strides " + dims_str(s.strides, s.ndim) + ", got " +
           dims_str(t.strides, t.ndim);
  });
  if (s.storage_elems > s.numel()) {
    const int64_t need = s.storage_elems * dtype_bytes(s.dtype);
    expect(t.storage_offset == 0 && t.storage_bytes >= need, [&] {
      return std::string(name) + " must start an allocation of at least " + to_string(need) + " bytes, got " +
             (t.storage_offset ? "a view at element " + to_string(t.storage_offset)
                               : to_string(t.storage_bytes) + " bytes");
    });
  }
}

}  // namespace anyep::runtime
