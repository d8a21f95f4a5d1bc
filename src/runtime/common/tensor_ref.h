// anyep/src/runtime/common/tensor_ref.h — a framework-free description of a tensor argument (device
// pointer, dtype, shape, strides) and of an output the caller must allocate. The runtime API
// (ll/api.h) takes these instead of torch tensors, so the Python extension and the C API share
// one call contract. Host code only; no CUDA, no torch.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace anyep::runtime {

// Element types. Names (dtype_name) are torch's spellings, so messages read the same from Python.
enum class DType : int {
  kOther = 0,  // a type no runtime argument takes (messages say "an unsupported dtype")
  kBool,
  kUInt8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kFloat8_e4m3fn,
  kFloat8_e5m2,
};
const char* dtype_name(DType t);
int64_t dtype_bytes(DType t);  // 0 for kOther

inline constexpr int kMaxDims = 8;

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kOther;
  int ndim = -1;  // -1: no tensor (an optional argument left out)
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements
  int device = -1;                 // CUDA device ordinal; -1: not device memory
  int64_t storage_offset = 0;      // elements from the start of the allocation to `data`
  int64_t storage_bytes = -1;      // bytes of the whole allocation; -1: unknown

  bool present() const { return ndim >= 0; }
  int64_t numel() const;
  // Row-major with no gaps; dimensions of size 1 may have any stride (torch's rule).
  bool contiguous() const;
};

// A contiguous tensor owning its whole allocation (C callers and tests).
TensorRef contiguous_ref(void* data, DType dtype, std::initializer_list<int64_t> shape, int device);

// What the caller allocates for an output: an allocation of storage_elems elements of dtype,
// viewed from its start with shape and strides (which may be column-major, or cover only part of
// the allocation: the LL handle's storage is larger than its [L, R*T] view).
struct OutputSpec {
  bool present = false;
  DType dtype = DType::kOther;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t storage_elems = 0;

  int64_t numel() const;
};
// Row-major output of `shape`, storage_elems = numel (or `storage_elems` when larger).
OutputSpec contiguous_spec(DType dtype, std::initializer_list<int64_t> shape, int64_t storage_elems = 0);

// "[2, 3]"; formatted with std::to_string (no iostreams in library code: docs/ll.md).
std::string dims_str(const int64_t* v, int n);
std::string shape_str(const TensorRef& t);

}  // namespace anyep::runtime
