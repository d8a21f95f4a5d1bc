// anyep/src/capi/config.h — the C API's inputs made C++: the versioned anyep_config_t read and
// checked into a GroupSpec, dtypes and tensor descriptors converted to the runtime's
// (runtime/common/tensor_ref.h), and runtime output specs back to anyep_tensor_t. Every refusal is an
// InvalidArgument (or Unsupported) that names the field.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "anyep/anyep.h"
#include "runtime/common/tensor_ref.h"

namespace anyep::capi {

// A checked copy of anyep_config_t with the defaults resolved.
struct GroupSpec {
  anyep_mode_t mode = ANYEP_MODE_LL;
  int rank = 0, num_ranks = 1;
  int device = ANYEP_DEVICE_CURRENT;  // ANYEP_DEVICE_NONE: GPU-free
  int64_t num_experts = 0, max_tokens = 0, hidden = 0;
  runtime::DType dispatch_dtype = runtime::DType::kBFloat16;
  runtime::DType combine_dtype = runtime::DType::kBFloat16;
  bool round_scale = false, ue8m0 = false;
  int64_t ll_bytes = 0;        // resolved: the shape's need when the config said 0
  int64_t ht_bytes = 0;        // resolved with HT in the mode: ht_default_bytes when the config said 0
  bool ht_bytes_auto = false;  // the config said 0 (the group re-sizes it for its node's ranks)
  double timeout_s = 30;       // resolved: ANYEP_TIMEOUT_S when the config said 0
  std::string ll_path;         // resolved: ANYEP_LL_PATH when the config said NULL or ""
  anyep_allocator_t allocator{};
  anyep_bootstrap_kind_t bootstrap = ANYEP_BOOTSTRAP_TCP;
  std::string tcp_host;
  uint16_t tcp_port = 0;
  int tcp_listen_fd = -1;
  anyep_allgather_fn allgather = nullptr;
  void* allgather_user = nullptr;

  bool gpu() const { return device != ANYEP_DEVICE_NONE; }
  bool has_ll() const { return mode == ANYEP_MODE_LL || mode == ANYEP_MODE_BOTH; }
  bool has_ht() const { return mode == ANYEP_MODE_HT || mode == ANYEP_MODE_BOTH; }
  bool fp8() const { return dispatch_dtype == runtime::DType::kFloat8_e4m3fn; }
};

// Reads `cfg` (struct_size first: smaller than any known version is refused; larger only with
// the unknown tail zero) and checks every field (the LL limits with LL in the mode, the
// HT limits with HT; more ranks than 64 nodes of 16 with HT is Unsupported).
GroupSpec read_config(const anyep_config_t* cfg);

// The bits of a C enum argument, read without loading the enum: a C caller may pass any int, and
// loading a C++ enum of a value outside its range is undefined (UBSan's -fsanitize=enum).
template <typename E>
int32_t raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "C enums are int-sized");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The runtime dtype of a C dtype's bits; InvalidArgument naming `what` for a value outside the enum.
runtime::DType to_dtype(int32_t t, const char* what);
anyep_dtype_t to_c_dtype(runtime::DType t);
// "ANYEP_BFLOAT16" ("ANYEP_DTYPE_INVALID" for another value), "ANYEP_MODE_LL" ("an unknown mode").
const char* c_dtype_name(int32_t t);
const char* mode_name(int32_t m);

// A versioned argument struct of the caller (struct_size first) copied into `out` as this library
// knows it (`known` bytes): a size smaller than `known`, or too large to be one, is refused naming
// `init`; so is a newer header's tail that is not zero.
void read_versioned(const void* in, size_t size, size_t known, void* out, const char* type, const char* init);
template <typename T>
T read_versioned(const T* in, const char* type, const char* init) {
  T out;
  read_versioned(in, in->struct_size, sizeof(T), &out, type, init);
  return out;
}

// The runtime descriptor of a C tensor argument (NULL: InvalidArgument "<name> is NULL" when
// required, an absent tensor when not). Checks ndim, sizes and the dtype enum.
runtime::TensorRef tensor_ref(const anyep_tensor_t* t, const char* name, bool required = true);
// An output the runtime describes, as a C descriptor with data NULL on `device`.
anyep_tensor_t to_c_tensor(const runtime::OutputSpec& s, int device);

}  // namespace anyep::capi
