#include "runtime/common/tensor_ref.h"

#include <algorithm>

namespace anyep::runtime {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBool:
      return "Bool";
    case DType::kUInt8:
      return "Byte";
    case DType::kInt8:
      return "Char";
    case DType::kInt16:
      return "Short";
    case DType::kInt32:
      return "Int";
    case DType::kInt64:
      return "Long";
    case DType::kFloat16:
      return "Half";
    case DType::kBFloat16:
      return "BFloat16";
    case DType::kFloat32:
      return "Float";
    case DType::kFloat64:
      return "Double";
    case DType::kFloat8_e4m3fn:
      return "Float8_e4m3fn";
    case DType::kFloat8_e5m2:
      return "Float8_e5m2";
    case DType::kOther:
      break;
  }
  return "an unsupported dtype";
}

int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kFloat8_e4m3fn:
    case DType::kFloat8_e5m2:
      return 1;
    case DType::kInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
    case DType::kOther:
      break;
  }
  return 0;
}

namespace {
int64_t product(const int64_t* v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}
void fill_row_major(const int64_t* shape, int n, int64_t* strides) {
  int64_t s = 1;
  for (int d = n - 1; d >= 0; --d) {
    strides[d] = s;
    s *= std::max<int64_t>(shape[d], 1);
  }
}
}  // namespace

int64_t TensorRef::numel() const { return ndim < 0 ? 0 : product(shape, ndim); }

bool TensorRef::contiguous() const {
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

TensorRef contiguous_ref(void* data, DType dtype, std::initializer_list<int64_t> shape, int device) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int>(std::min<size_t>(shape.size(), kMaxDims));
  std::copy_n(shape.begin(), t.ndim, t.shape);
  fill_row_major(t.shape, t.ndim, t.strides);
  t.device = device;
  t.storage_bytes = t.numel() * dtype_bytes(dtype);
  return t;
}

int64_t OutputSpec::numel() const { return product(shape, ndim); }

OutputSpec contiguous_spec(DType dtype, std::initializer_list<int64_t> shape, int64_t storage_elems) {
  OutputSpec s;
  s.present = true;
  s.dtype = dtype;
  s.ndim = static_cast<int>(std::min<size_t>(shape.size(), kMaxDims));
  std::copy_n(shape.begin(), s.ndim, s.shape);
  fill_row_major(s.shape, s.ndim, s.strides);
  s.storage_elems = std::max(storage_elems, s.numel());
  return s;
}

std::string dims_str(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string shape_str(const TensorRef& t) { return dims_str(t.shape, std::max(t.ndim, 0)); }

}  // namespace anyep::runtime
