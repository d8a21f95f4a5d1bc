#include "capi/config.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "capi/ht_options.h"
#include "common/env.h"
#include "common/error.h"
#include "common/parse.h"
#include "runtime/ht/internode_plan.h"  // runtime::kHTMaxNodes
#include "runtime/ht/validate.h"        // ht:: limits and geometry, through the runtime contract
#include "runtime/ll/validate.h"

namespace anyep::capi {
namespace {

using std::to_string;

// Sizes of anyep_config_t this library knows, oldest first (one version so far).
constexpr size_t kConfigV1 = sizeof(anyep_config_t);
// A struct_size larger than this is not a size but garbage (an uninitialised struct).
constexpr size_t kMaxConfigBytes = 64 * 1024;

struct DTypeName {
  anyep_dtype_t c;
  runtime::DType rt;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {ANYEP_BOOL, runtime::DType::kBool, "ANYEP_BOOL"},
    {ANYEP_UINT8, runtime::DType::kUInt8, "ANYEP_UINT8"},
    {ANYEP_INT8, runtime::DType::kInt8, "ANYEP_INT8"},
    {ANYEP_INT16, runtime::DType::kInt16, "ANYEP_INT16"},
    {ANYEP_INT32, runtime::DType::kInt32, "ANYEP_INT32"},
    {ANYEP_INT64, runtime::DType::kInt64, "ANYEP_INT64"},
    {ANYEP_FLOAT16, runtime::DType::kFloat16, "ANYEP_FLOAT16"},
    {ANYEP_BFLOAT16, runtime::DType::kBFloat16, "ANYEP_BFLOAT16"},
    {ANYEP_FLOAT32, runtime::DType::kFloat32, "ANYEP_FLOAT32"},
    {ANYEP_FLOAT64, runtime::DType::kFloat64, "ANYEP_FLOAT64"},
    {ANYEP_FLOAT8_E4M3, runtime::DType::kFloat8_e4m3fn, "ANYEP_FLOAT8_E4M3"},
    {ANYEP_FLOAT8_E5M2, runtime::DType::kFloat8_e5m2, "ANYEP_FLOAT8_E5M2"},
};

InvalidArgument bad(const std::string& field, const std::string& why) { return InvalidArgument(field + " " + why); }

// The versioned struct: copies what this library knows of `cfg` into a current-version struct.
anyep_config_t read_versioned(const anyep_config_t* cfg) {
  const size_t size = cfg->struct_size;
  if (size < kConfigV1 || size > kMaxConfigBytes) {
    std::string m = "cfg->struct_size is " + to_string(size) + ", not a size of anyep_config_t this library (anyep ";
    m += ANYEP_VERSION_STRING;
    m += ") knows (";
    m += to_string(kConfigV1);
    m += "): set it to sizeof(anyep_config_t), e.g. with anyep_config_init()";
    throw InvalidArgument(m);
  }
  // A newer header's struct: accepted only if the fields this library does not know are unset.
  const auto* bytes = reinterpret_cast<const unsigned char*>(cfg);
  for (size_t i = kConfigV1; i < size; ++i)
    if (bytes[i] != 0) {
      std::string m = "cfg sets a field at byte " + to_string(i) + " that this library (anyep ";
      m += ANYEP_VERSION_STRING;
      m += ", anyep_config_t of " + to_string(kConfigV1) + " bytes) does not know: the program was built against ";
      m += "a newer anyep.h than the library it runs with";
      throw InvalidArgument(m);
    }
  anyep_config_t c;
  std::memcpy(&c, cfg, kConfigV1);
  return c;
}

// The LL path names ANYEP_LL_PATH accepts (the environment registry is their one list).
std::string check_ll_path(const char* text) {
  for (const env::VarInfo& v : env::all_vars()) {
    if (std::strcmp(v.name, "ANYEP_LL_PATH") != 0) continue;
    const std::string choices = v.choices;
    std::string accepted;
    for (size_t p = 0; p <= choices.size();) {
      size_t q = choices.find('|', p);
      if (q == std::string::npos) q = choices.size();
      const std::string c = choices.substr(p, q - p);
      if (!c.empty() && c == text) return c;
      if (!c.empty()) accepted += (accepted.empty() ? "" : ", ") + c;
      p = q + 1;
    }
    throw InvalidArgument(std::string("cfg->ll_path='") + text + "' is not accepted (accepted: " + accepted +
                          ", or NULL for ANYEP_LL_PATH)");
  }
  throw InternalError("capi: ANYEP_LL_PATH is not in the environment registry");
}

// HT's limits (kernels/ht/layout.h, ht/internode_protocol.h): ranks, experts per rank, row size.
// The ranks per node (at most 16, reached by direct stores) are checked once the group knows its
// nodes (group.cpp).
void check_ht_limits(const GroupSpec& s) {
  constexpr int kMost = ht::kMaxRanks * runtime::kHTMaxNodes;
  if (s.num_ranks > kMost)
    throw Unsupported("cfg->num_ranks is " + to_string(s.num_ranks) + ": high-throughput mode (cfg->mode " +
                      mode_name(s.mode) + ") reaches at most " + to_string(kMost) + " ranks (" +
                      to_string(runtime::kHTMaxNodes) + " nodes of " + to_string(ht::kMaxRanks) + ")");
  if (s.num_experts / s.num_ranks > ht::kMaxLocalExperts)
    throw bad("cfg->num_experts", "is " + to_string(s.num_experts) + ": " + to_string(s.num_experts / s.num_ranks) +
                                      " experts per rank, high-throughput mode takes at most " +
                                      to_string(ht::kMaxLocalExperts));
  if (s.hidden % 128 != 0)
    throw bad("cfg->hidden", "is " + to_string(s.hidden) + ", not a multiple of 128 (high-throughput rows and scales)");
}

}  // namespace

const char* c_dtype_name(int32_t t) {
  for (const DTypeName& d : kDTypes)
    if (d.c == t) return d.name;
  return "ANYEP_DTYPE_INVALID";
}

const char* mode_name(int32_t m) {
  switch (m) {
    case ANYEP_MODE_LL:
      return "ANYEP_MODE_LL";
    case ANYEP_MODE_HT:
      return "ANYEP_MODE_HT";
    case ANYEP_MODE_BOTH:
      return "ANYEP_MODE_BOTH";
  }
  return "an unknown mode";
}

runtime::DType to_dtype(int32_t t, const char* what) {
  for (const DTypeName& d : kDTypes)
    if (d.c == t) return d.rt;
  if (t == ANYEP_DTYPE_INVALID) throw bad(what, "is not set (ANYEP_DTYPE_INVALID)");
  throw bad(what, "is " + to_string(t) + ", not an anyep_dtype_t value");
}

anyep_dtype_t to_c_dtype(runtime::DType t) {
  for (const DTypeName& d : kDTypes)
    if (d.rt == t) return d.c;
  return ANYEP_DTYPE_INVALID;
}

GroupSpec read_config(const anyep_config_t* cfg_in) {
  const anyep_config_t c = read_versioned(cfg_in);
  GroupSpec s;
  const int32_t mode = raw_enum(c.mode);
  if (mode != ANYEP_MODE_LL && mode != ANYEP_MODE_HT && mode != ANYEP_MODE_BOTH)
    throw bad("cfg->mode",
              "is " + to_string(mode) + ", not ANYEP_MODE_LL (1), ANYEP_MODE_HT (2) or ANYEP_MODE_BOTH (3)");
  s.mode = static_cast<anyep_mode_t>(mode);
  if (c.num_ranks < 1) throw bad("cfg->num_ranks", "is " + to_string(c.num_ranks) + ", must be at least 1");
  if (c.rank < 0 || c.rank >= c.num_ranks)
    throw bad("cfg->rank", "is " + to_string(c.rank) + ", outside [0, num_ranks=" + to_string(c.num_ranks) + ")");
  s.rank = c.rank;
  s.num_ranks = c.num_ranks;
  if (c.device < ANYEP_DEVICE_NONE)
    throw bad("cfg->device", "is " + to_string(c.device) +
                                 ", not a CUDA device ordinal, ANYEP_DEVICE_CURRENT (-1) or ANYEP_DEVICE_NONE (-2)");
  s.device = c.device;

  if (c.num_experts < 1) throw bad("cfg->num_experts", "is " + to_string(c.num_experts) + ", must be at least 1");
  if (c.num_experts % c.num_ranks != 0)
    throw bad("cfg->num_experts",
              "is " + to_string(c.num_experts) + ", not a multiple of num_ranks=" + to_string(c.num_ranks));
  if (c.max_tokens_per_rank < 1)
    throw bad("cfg->max_tokens_per_rank", "is " + to_string(c.max_tokens_per_rank) + ", must be at least 1");
  if (c.hidden < 1) throw bad("cfg->hidden", "is " + to_string(c.hidden) + ", must be at least 1");
  s.num_experts = c.num_experts;
  s.max_tokens = c.max_tokens_per_rank;
  s.hidden = c.hidden;
  // The LL limits (hidden a multiple of 128 up to 16384, experts, tokens) and the buffer it needs.
  int64_t need = 0;
  if (s.has_ll()) {
    runtime::LLBufferInfo unbounded;
    unbounded.num_ranks = c.num_ranks;
    unbounded.num_bytes = std::numeric_limits<int64_t>::max();
    unbounded.compact = runtime::compact_layout_from_env();
    const ll::Layout g = runtime::validate_layout(s.max_tokens, s.hidden, s.num_experts, unbounded);
    need = static_cast<int64_t>(g.total_bytes());
  }
  if (s.has_ht()) check_ht_limits(s);

  s.dispatch_dtype = to_dtype(raw_enum(c.dispatch_dtype), "cfg->dispatch_dtype");
  if (s.dispatch_dtype != runtime::DType::kBFloat16 && s.dispatch_dtype != runtime::DType::kFloat8_e4m3fn)
    throw bad("cfg->dispatch_dtype", std::string("is ") + c_dtype_name(raw_enum(c.dispatch_dtype)) +
                                         ": dispatch delivers ANYEP_BFLOAT16 or ANYEP_FLOAT8_E4M3");
  s.combine_dtype = to_dtype(raw_enum(c.combine_dtype), "cfg->combine_dtype");
  if (s.combine_dtype != runtime::DType::kBFloat16)
    throw bad("cfg->combine_dtype", std::string("is ") + c_dtype_name(raw_enum(c.combine_dtype)) +
                                        ": combine takes and returns ANYEP_BFLOAT16");
  constexpr uint32_t kKnownFlags = ANYEP_CONFIG_ROUND_SCALE | ANYEP_CONFIG_UE8M0;
  if (c.flags & ~kKnownFlags)
    throw bad("cfg->flags", "has unknown bits " + to_string(c.flags & ~kKnownFlags) + " (known: ANYEP_CONFIG_*)");
  s.round_scale = c.flags & ANYEP_CONFIG_ROUND_SCALE;
  s.ue8m0 = c.flags & ANYEP_CONFIG_UE8M0;
  if ((s.round_scale || s.ue8m0) && !s.fp8())
    throw bad("cfg->flags", "sets ANYEP_CONFIG_ROUND_SCALE or ANYEP_CONFIG_UE8M0, which need an FP8 dispatch_dtype");
  if (s.ue8m0 && !s.round_scale) throw bad("cfg->flags", "sets ANYEP_CONFIG_UE8M0 without ANYEP_CONFIG_ROUND_SCALE");
  if (s.ue8m0 && s.hidden % 512 != 0)
    throw bad("cfg->flags", "sets ANYEP_CONFIG_UE8M0, which needs hidden to be a multiple of 512 (hidden=" +
                                to_string(s.hidden) + ")");

  if (c.ll_buffer_bytes < 0)
    throw bad("cfg->ll_buffer_bytes", "is " + to_string(c.ll_buffer_bytes) + ", must be 0 (auto) or positive");
  if (c.ll_buffer_bytes > 0 && c.ll_buffer_bytes < need)
    throw bad("cfg->ll_buffer_bytes", "is " + to_string(c.ll_buffer_bytes) + ", smaller than the " + to_string(need) +
                                          " bytes the shape needs (0: exactly that)");
  s.ll_bytes = c.ll_buffer_bytes > 0 ? c.ll_buffer_bytes : need;
  if (c.ht_buffer_bytes < 0)
    throw bad("cfg->ht_buffer_bytes", "is " + to_string(c.ht_buffer_bytes) + ", must be 0 (auto) or positive");
  if (s.has_ht() && c.ht_buffer_bytes > 0 && c.ht_buffer_bytes < static_cast<int64_t>(ht::kRingsOff))
    throw bad("cfg->ht_buffer_bytes", "is " + to_string(c.ht_buffer_bytes) + ", below the " + to_string(ht::kRingsOff) +
                                          " bytes of HT control data (0: auto)");
  s.ht_bytes = c.ht_buffer_bytes > 0 || !s.has_ht() ? c.ht_buffer_bytes : ht_default_bytes(s.hidden, s.num_ranks);
  s.ht_bytes_auto = s.has_ht() && c.ht_buffer_bytes == 0;

  if (c.timeout_s == 0) {
    s.timeout_s = env::get_duration_s("ANYEP_TIMEOUT_S");
  } else if (!std::isfinite(c.timeout_s) || c.timeout_s < 0 || c.timeout_s > 86400) {
    throw bad("cfg->timeout_s", "must be 0 (ANYEP_TIMEOUT_S) or seconds in (0, 86400]");
  } else {
    s.timeout_s = c.timeout_s;
  }
  s.ll_path = (c.ll_path && *c.ll_path) ? check_ll_path(c.ll_path) : env::get_enum("ANYEP_LL_PATH");
  if (s.ll_path.empty()) s.ll_path = "auto";

  if ((c.allocator.alloc == nullptr) != (c.allocator.free == nullptr))
    throw bad("cfg->allocator", "sets only one of alloc and free: set both, or neither (cudaMalloc / cudaFree)");
  s.allocator = c.allocator;

  const anyep_bootstrap_t& b = c.bootstrap;
  const int32_t kind = raw_enum(b.kind);
  if (kind == ANYEP_BOOTSTRAP_TCP) {
    if (b.tcp_host == nullptr || *b.tcp_host == 0)
      throw bad("cfg->bootstrap.tcp_host", "is empty: name rank 0's address (e.g. \"127.0.0.1\")");
    s.tcp_host = b.tcp_host;
    const bool has_fd = c.rank == 0 && b.tcp_listen_fd >= 0;
    if (b.tcp_port == 0 && !has_fd)
      throw bad("cfg->bootstrap.tcp_port", c.rank == 0 ? "is 0 and tcp_listen_fd is -1: give rank 0 a port, or a socket"
                                                       : "is 0: give every rank the port rank 0 listens on");
    s.tcp_port = b.tcp_port;
    s.tcp_listen_fd = has_fd ? b.tcp_listen_fd : -1;
  } else if (kind == ANYEP_BOOTSTRAP_ALLGATHER) {
    if (b.allgather == nullptr) throw bad("cfg->bootstrap.allgather", "is NULL with kind ANYEP_BOOTSTRAP_ALLGATHER");
    s.allgather = b.allgather;
    s.allgather_user = b.allgather_user;
  } else {
    throw bad("cfg->bootstrap.kind",
              "is " + to_string(kind) + ", not ANYEP_BOOTSTRAP_TCP (1) or ANYEP_BOOTSTRAP_ALLGATHER (2)");
  }
  s.bootstrap = static_cast<anyep_bootstrap_kind_t>(kind);
  return s;
}

void read_versioned(const void* in, size_t size, size_t known, void* out, const char* type, const char* init) {
  if (size < known || size > kMaxConfigBytes)
    throw InvalidArgument(std::string("args->struct_size is ") + to_string(size) + ", not a size of " + type +
                          " this library knows (" + to_string(known) + "): set it with " + init + "()");
  const auto* bytes = static_cast<const unsigned char*>(in);
  for (size_t i = known; i < size; ++i)
    if (bytes[i] != 0)
      throw InvalidArgument(std::string("args sets a field at byte ") + to_string(i) + " that this library's " + type +
                            " (" + to_string(known) +
                            " bytes) does not know: the program was built against a newer "
                            "anyep.h than the library it runs with");
  std::memcpy(out, in, known);
}

runtime::TensorRef tensor_ref(const anyep_tensor_t* t, const char* name, bool required) {
  runtime::TensorRef r;
  if (t == nullptr) {
    if (required) throw InvalidArgument(std::string(name) + " is NULL");
    return r;
  }
  const std::string n(name);
  r.dtype = to_dtype(raw_enum(t->dtype), (n + ".dtype").c_str());
  if (t->ndim < 0 || t->ndim > ANYEP_MAX_DIMS)
    throw bad(n + ".ndim", "is " + to_string(t->ndim) + ", outside [0, " + to_string(ANYEP_MAX_DIMS) + "]");
  r.ndim = t->ndim;
  bool all_zero = true;
  for (int d = 0; d < r.ndim; ++d) {
    if (t->shape[d] < 0) throw bad(n + ".shape[" + to_string(d) + "]", "is " + to_string(t->shape[d]));
    if (t->strides[d] < 0)
      throw bad(n + ".strides[" + to_string(d) + "]",
                "is " + to_string(t->strides[d]) + " (negative strides are not supported)");
    all_zero = all_zero && t->strides[d] == 0;
    r.shape[d] = t->shape[d];
  }
  // All-zero strides: row-major contiguous.
  int64_t stride = 1, span = 1;
  for (int d = r.ndim - 1; d >= 0; --d) {
    r.strides[d] = all_zero ? stride : t->strides[d];
    stride *= r.shape[d];
  }
  const int64_t numel = r.numel();
  for (int d = 0; d < r.ndim; ++d) span += (r.shape[d] - 1) * r.strides[d];
  if (numel > 0 && t->data == nullptr)
    throw bad(n + ".data", "is NULL for a tensor of " + to_string(numel) + " elements");
  if (t->device < 0)
    throw bad(n + ".device", "is " + to_string(t->device) + ": tensors live on a CUDA device (ordinal >= 0)");
  r.data = t->data;
  r.device = t->device;
  r.storage_offset = 0;
  r.storage_bytes = numel > 0 ? span * runtime::dtype_bytes(r.dtype) : 0;
  return r;
}

anyep_tensor_t to_c_tensor(const runtime::OutputSpec& s, int device) {
  anyep_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.dtype = to_c_dtype(s.dtype);
  t.device = device;
  if (!s.present) return t;  // ndim 0, dtype invalid: no such output
  t.ndim = s.ndim;
  for (int d = 0; d < s.ndim; ++d) {
    t.shape[d] = s.shape[d];
    t.strides[d] = s.strides[d];
  }
  return t;
}

}  // namespace anyep::capi
