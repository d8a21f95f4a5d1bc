// The C API's documented refusals, on the CPU: GPU-free groups of one rank (an allgather callback
// that returns the caller's own bytes) run every argument check of every call. Each case checks
// the status and the message (which names the function and the argument), and that nothing
// crashes or leaks across the boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "anyep/anyep.h"
#include "c_caller.h"
#include "capi_test_util.h"

namespace {

using capi_test::refused;
using capi_test::tensor;

static_assert(offsetof(anyep_config_t, struct_size) == 0, "struct_size is the first field");

// A C caller may put any int where the API has an enum; C++ may not even load such a value. The
// tests write the bits (set_raw), and call with an int through C functions (c_caller.h), as a C
// caller would.
template <typename E>
void set_raw(E& field, int32_t v) {
  static_assert(sizeof(E) == sizeof v, "C enums are int-sized");
  std::memcpy(&field, &v, sizeof v);
}

int failing_allgather(const void*, void*, size_t, void*) { return 5; }

anyep_config_t gpu_free_config() { return capi_test::one_rank_config(ANYEP_MODE_LL); }

class GpuFree : public ::testing::Test {
 protected:
  void SetUp() override {
    anyep_config_t c = gpu_free_config();
    ASSERT_EQ(anyep_group_create(&c, &group), ANYEP_SUCCESS) << anyep_get_last_error();
    anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
    ASSERT_EQ(ll_create(group, &idx, &handle), ANYEP_SUCCESS) << anyep_get_last_error();
  }
  void TearDown() override {
    if (handle) {
      EXPECT_EQ(anyep_handle_destroy(handle), ANYEP_SUCCESS) << anyep_get_last_error();
    }
    if (group) {
      EXPECT_EQ(anyep_group_destroy(group), ANYEP_SUCCESS) << anyep_get_last_error();
    }
  }
  // Every dispatch argument right for the handle (N = 4 tokens, K = 2).
  anyep_tensor_t x = tensor(ANYEP_BFLOAT16, {4, 256});
  anyep_tensor_t recv_x = tensor(ANYEP_BFLOAT16, {8, 16, 256});
  anyep_tensor_t recv_count = tensor(ANYEP_INT32, {8});
  anyep_tensor_t expert_x = tensor(ANYEP_BFLOAT16, {8, 16, 256});
  anyep_tensor_t weights = tensor(ANYEP_FLOAT32, {4, 2});
  anyep_tensor_t out = tensor(ANYEP_BFLOAT16, {4, 256});
  anyep_group_t group = nullptr;
  anyep_handle_t handle = nullptr;
};

TEST(CApi, VersionAndStatusNames) {
  EXPECT_STREQ(anyep_version(), ANYEP_VERSION_STRING);
  EXPECT_STREQ(anyep_status_name(ANYEP_ERR_UNSUPPORTED), "ANYEP_ERR_UNSUPPORTED");
  EXPECT_STREQ(anyep_status_name(ANYEP_SUCCESS), "ANYEP_SUCCESS");
  EXPECT_STREQ(c_caller_status_name(99), "ANYEP_ERR_UNKNOWN");
  // The deprecated spellings stay what they were: aliases of the same values, the old names.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT_STREQ(anyepStatusName(anyepUnsupported), "anyepUnsupported");
  const anyepStatus old = anyepTimeout;
  EXPECT_EQ(old, ANYEP_ERR_TIMEOUT);
#pragma GCC diagnostic pop
}

TEST(CApi, NullPointersAreRefusedByName) {
  anyep_config_t c = gpu_free_config();
  anyep_group_t g = reinterpret_cast<anyep_group_t>(0x1);
  EXPECT_TRUE(
      refused(anyep_group_create(nullptr, &g), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_group_create", "cfg is NULL"}));
  EXPECT_EQ(g, nullptr) << "the out handle is cleared on failure";
  EXPECT_TRUE(refused(anyep_group_create(&c, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"group is NULL"}));
  EXPECT_TRUE(
      refused(anyep_group_destroy(nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_group_destroy", "group is NULL"}));
  anyep_status_t st = ANYEP_SUCCESS;
  EXPECT_TRUE(refused(anyep_group_get_async_error(nullptr, &st), ANYEP_ERR_INVALID_ARGUMENT, {"group is NULL"}));
  EXPECT_TRUE(refused(anyep_get_device_count(nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"count is NULL"}));
  EXPECT_TRUE(refused(anyep_get_dispatch_outputs(nullptr, nullptr, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"group is NULL"}));
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  anyep_handle_t h = nullptr;
  EXPECT_TRUE(refused(ll_create(nullptr, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"group is NULL"}));
  EXPECT_TRUE(refused(anyep_handle_destroy(nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"handle is NULL"}));
  EXPECT_TRUE(refused(ll_dispatch(nullptr, &idx, &idx, nullptr, &idx, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_dispatch", "handle is NULL"}));
  EXPECT_TRUE(refused(ll_combine(nullptr, &idx, &idx, &idx, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_combine", "handle is NULL"}));
  EXPECT_TRUE(
      refused(anyep_complete(nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_complete", "handle is NULL"}));
}

TEST_F(GpuFree, NullArgumentsOfCalls) {
  anyep_handle_t h = nullptr;
  EXPECT_TRUE(
      refused(ll_create(group, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_handle_create", "topk_idx is NULL"}));
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  EXPECT_TRUE(refused(ll_create(group, &idx, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"handle is NULL"}));
  anyep_status_t st = ANYEP_SUCCESS;
  EXPECT_TRUE(
      refused(anyep_group_get_async_error(group, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"async_error is NULL"}));
  EXPECT_TRUE(refused(ll_dispatch(handle, nullptr, &recv_x, nullptr, &recv_count, 0, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"x is NULL"}));
  EXPECT_TRUE(refused(ll_dispatch(handle, &x, nullptr, nullptr, &recv_count, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"recv_x is NULL"}));
  EXPECT_TRUE(refused(ll_dispatch(handle, &x, &recv_x, nullptr, nullptr, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"recv_count is NULL"}));
  EXPECT_TRUE(
      refused(ll_combine(handle, nullptr, &weights, &out, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"x is NULL"}));
  EXPECT_TRUE(refused(ll_combine(handle, &expert_x, nullptr, &out, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"topk_weights is NULL"}));
  EXPECT_TRUE(refused(ll_combine(handle, &expert_x, &weights, nullptr, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"out is NULL"}));
  x.data = nullptr;
  EXPECT_TRUE(refused(ll_dispatch(handle, &x, &recv_x, nullptr, &recv_count, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"x.data is NULL", "1024 elements"}));
  EXPECT_EQ(anyep_group_get_async_error(group, &st), ANYEP_SUCCESS);
  EXPECT_EQ(st, ANYEP_SUCCESS) << "a GPU-free group has no asynchronous error";
}

TEST(CApi, StructSizeIsChecked) {
  anyep_group_t g = nullptr;
  anyep_config_t c = gpu_free_config();
  c.struct_size = 0;
  EXPECT_TRUE(refused(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT,
                      {"cfg->struct_size is 0", "sizeof(anyep_config_t)"}));
  c.struct_size = sizeof(anyep_config_t) - 8;
  EXPECT_TRUE(refused(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT,
                      {"cfg->struct_size is " + std::to_string(sizeof(anyep_config_t) - 8)}));
  c.struct_size = size_t{1} << 40;  // an uninitialised struct
  EXPECT_TRUE(refused(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT, {"not a size of anyep_config_t"}));

  // A newer header's struct: unknown fields set are refused, unset ones accepted.
  struct Newer {
    anyep_config_t v1;
    uint64_t future_field;
  } n;
  n.v1 = gpu_free_config();
  n.v1.struct_size = sizeof n;
  n.future_field = 7;
  EXPECT_TRUE(refused(anyep_group_create(&n.v1, &g), ANYEP_ERR_INVALID_ARGUMENT, {"newer anyep.h"}));
  n.future_field = 0;
  ASSERT_EQ(anyep_group_create(&n.v1, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS) << anyep_get_last_error();
}

struct ConfigCase {
  const char* name;
  void (*mutate)(anyep_config_t&);
  anyep_status_t status;
  std::vector<std::string> text;
};

TEST(CApi, EveryConfigFieldIsChecked) {
  const ConfigCase cases[] = {
      {"mode out of enum",
       [](anyep_config_t& c) { set_raw(c.mode, 7); },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->mode is 7"}},
      {"HT mode past 64 nodes of 16 ranks",
       [](anyep_config_t& c) {
         c.mode = ANYEP_MODE_HT;
         c.num_ranks = 1025;
         c.num_experts = 2050;
       },
       ANYEP_ERR_UNSUPPORTED,
       {"cfg->num_ranks is 1025", "ANYEP_MODE_HT", "at most 1024 ranks (64 nodes of 16)"}},
      {"HT buffer below its control data",
       [](anyep_config_t& c) {
         c.mode = ANYEP_MODE_BOTH;
         c.ht_buffer_bytes = 4096;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->ht_buffer_bytes is 4096", "HT control data"}},
      {"HT hidden not a multiple of 128",
       [](anyep_config_t& c) {
         c.mode = ANYEP_MODE_HT;
         c.hidden = 200;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->hidden is 200", "high-throughput"}},
      {"HT experts per rank past 1024",
       [](anyep_config_t& c) {
         c.mode = ANYEP_MODE_HT;
         c.num_experts = 1025;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->num_experts is 1025", "at most 1024"}},
      {"no ranks", [](anyep_config_t& c) { c.num_ranks = 0; }, ANYEP_ERR_INVALID_ARGUMENT, {"cfg->num_ranks is 0"}},
      {"rank past the end",
       [](anyep_config_t& c) { c.rank = 1; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->rank is 1", "[0, num_ranks=1)"}},
      {"device", [](anyep_config_t& c) { c.device = -3; }, ANYEP_ERR_INVALID_ARGUMENT, {"cfg->device is -3"}},
      {"no experts",
       [](anyep_config_t& c) { c.num_experts = 0; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->num_experts is 0"}},
      {"experts not a multiple of ranks",
       [](anyep_config_t& c) {
         c.num_ranks = 2;
         c.num_experts = 3;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->num_experts is 3", "multiple of num_ranks=2"}},
      {"no tokens",
       [](anyep_config_t& c) { c.max_tokens_per_rank = 0; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->max_tokens_per_rank is 0"}},
      {"hidden not a multiple of 128",
       [](anyep_config_t& c) { c.hidden = 100; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"hidden"}},
      {"hidden past the limit", [](anyep_config_t& c) { c.hidden = 32768; }, ANYEP_ERR_INVALID_ARGUMENT, {"hidden"}},
      {"experts past the limit",
       [](anyep_config_t& c) { c.num_experts = 8192; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"experts"}},
      {"dispatch dtype unsupported",
       [](anyep_config_t& c) { c.dispatch_dtype = ANYEP_INT32; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->dispatch_dtype is ANYEP_INT32"}},
      {"dispatch dtype out of enum",
       [](anyep_config_t& c) { set_raw(c.dispatch_dtype, 99); },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->dispatch_dtype is 99, not an anyep_dtype_t value"}},
      {"dispatch dtype unset",
       [](anyep_config_t& c) { c.dispatch_dtype = ANYEP_DTYPE_INVALID; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->dispatch_dtype is not set"}},
      {"combine dtype",
       [](anyep_config_t& c) { c.combine_dtype = ANYEP_FLOAT8_E4M3; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->combine_dtype is ANYEP_FLOAT8_E4M3"}},
      {"unknown flag", [](anyep_config_t& c) { c.flags = 0x80; }, ANYEP_ERR_INVALID_ARGUMENT, {"cfg->flags", "128"}},
      {"round scale without FP8",
       [](anyep_config_t& c) { c.flags = ANYEP_CONFIG_ROUND_SCALE; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"need an FP8 dispatch_dtype"}},
      {"UE8M0 without round scale",
       [](anyep_config_t& c) {
         c.dispatch_dtype = ANYEP_FLOAT8_E4M3;
         c.flags = ANYEP_CONFIG_UE8M0;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"without ANYEP_CONFIG_ROUND_SCALE"}},
      {"UE8M0 hidden",
       [](anyep_config_t& c) {
         c.dispatch_dtype = ANYEP_FLOAT8_E4M3;
         c.flags = ANYEP_CONFIG_ROUND_SCALE | ANYEP_CONFIG_UE8M0;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"multiple of 512"}},
      {"negative LL buffer",
       [](anyep_config_t& c) { c.ll_buffer_bytes = -1; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->ll_buffer_bytes is -1"}},
      {"LL buffer too small",
       [](anyep_config_t& c) { c.ll_buffer_bytes = 1000; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->ll_buffer_bytes is 1000", "bytes the shape needs"}},
      {"negative HT buffer",
       [](anyep_config_t& c) { c.ht_buffer_bytes = -1; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->ht_buffer_bytes"}},
      {"negative timeout", [](anyep_config_t& c) { c.timeout_s = -1; }, ANYEP_ERR_INVALID_ARGUMENT, {"cfg->timeout_s"}},
      {"NaN timeout",
       [](anyep_config_t& c) { c.timeout_s = std::nan(""); },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->timeout_s"}},
      {"LL path",
       [](anyep_config_t& c) { c.ll_path = "bogus"; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->ll_path='bogus'", "auto, proxy-cuda-ipc, proxy-libfabric"}},
      {"half an allocator",
       [](anyep_config_t& c) { c.allocator.alloc = [](size_t, int32_t, void*) -> void* { return nullptr; }; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->allocator", "only one of alloc and free"}},
      {"bootstrap kind",
       [](anyep_config_t& c) { set_raw(c.bootstrap.kind, 9); },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->bootstrap.kind is 9"}},
      {"allgather missing",
       [](anyep_config_t& c) { c.bootstrap.allgather = nullptr; },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->bootstrap.allgather is NULL"}},
      {"TCP host missing",
       [](anyep_config_t& c) {
         c.bootstrap.kind = ANYEP_BOOTSTRAP_TCP;
         c.bootstrap.tcp_host = nullptr;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->bootstrap.tcp_host is empty"}},
      {"TCP port missing",
       [](anyep_config_t& c) {
         c.bootstrap.kind = ANYEP_BOOTSTRAP_TCP;
         c.bootstrap.tcp_port = 0;
       },
       ANYEP_ERR_INVALID_ARGUMENT,
       {"cfg->bootstrap.tcp_port is 0"}},
      {"allgather callback fails",
       [](anyep_config_t& c) { c.bootstrap.allgather = failing_allgather; },
       ANYEP_ERR_TRANSPORT,
       {"allgather callback", "returned 5"}},
  };
  for (const ConfigCase& k : cases) {
    anyep_config_t c = gpu_free_config();
    k.mutate(c);
    anyep_group_t g = nullptr;
    EXPECT_TRUE(refused(anyep_group_create(&c, &g), k.status, k.text)) << k.name;
    EXPECT_EQ(g, nullptr) << k.name;
    EXPECT_EQ(std::string(anyep_get_last_error()).rfind("anyep_group_create: ", 0), 0u) << k.name;
  }
}

TEST(CApi, GpuConfigWithoutGpuSaysNoGpu) {
  int32_t n = -1;
  ASSERT_EQ(anyep_get_device_count(&n), ANYEP_SUCCESS);
  if (n > 0) GTEST_SKIP() << "this machine has " << n << " GPU(s): the no-GPU refusal cannot be shown here";
  anyep_config_t c = gpu_free_config();
  c.device = ANYEP_DEVICE_CURRENT;
  anyep_group_t g = nullptr;
  EXPECT_TRUE(refused(anyep_group_create(&c, &g), ANYEP_ERR_UNSUPPORTED, {"no GPU", "ANYEP_DEVICE_NONE"}));
}

TEST(CApi, DoubleDestroyAndStaleHandles) {
  anyep_config_t c = gpu_free_config();
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  anyep_handle_t h = nullptr, h2 = nullptr;
  ASSERT_EQ(ll_create(g, &idx, &h), ANYEP_SUCCESS) << anyep_get_last_error();
  ASSERT_EQ(ll_create(g, &idx, &h2), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_EQ(anyep_handle_destroy(h), ANYEP_SUCCESS);
  EXPECT_TRUE(refused(anyep_handle_destroy(h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_handle_destroy", "is not a live anyep handle", "destroyed already"}));
  EXPECT_TRUE(refused(anyep_complete(h, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep handle"}));
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_TRUE(refused(anyep_group_destroy(g), ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep group"}));
  anyep_status_t st;
  EXPECT_TRUE(refused(anyep_group_get_async_error(g, &st), ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep group"}));
  anyep_handle_t h3 = nullptr;
  EXPECT_TRUE(refused(ll_create(g, &idx, &h3), ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep group"}));
  // A handle that outlived its group: refused by name, then destroyed cleanly.
  anyep_tensor_t x = tensor(ANYEP_BFLOAT16, {4, 256});
  EXPECT_TRUE(refused(ll_dispatch(h2, &x, &x, nullptr, &x, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"the handle's group was destroyed"}));
  EXPECT_EQ(anyep_handle_destroy(h2), ANYEP_SUCCESS) << anyep_get_last_error();
  // A value that never was a handle.
  EXPECT_TRUE(refused(anyep_group_destroy(reinterpret_cast<anyep_group_t>(uintptr_t{0x7fff1234})),
                      ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep group"}));
}

TEST_F(GpuFree, HandleRoutingIsChecked) {
  anyep_handle_t h = nullptr;
  anyep_tensor_t idx = tensor(ANYEP_INT32, {4, 2});
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx must be Long, got Int"}));
  idx = tensor(ANYEP_INT64, {4, 2});
  set_raw(idx.dtype, 42);
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"topk_idx.dtype is 42, not an anyep_dtype_t value"}));
  idx = tensor(ANYEP_INT64, {8});
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx must have 2 dimensions"}));
  idx = tensor(ANYEP_INT64, {17, 2});
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"17 tokens", "max_tokens_per_rank=16"}));
  idx = tensor(ANYEP_INT64, {4, 17});
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"17 experts per token", "[1, 16]"}));
  idx = tensor(ANYEP_INT64, {4, 2});
  idx.ndim = 9;
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx.ndim is 9"}));
  idx = tensor(ANYEP_INT64, {4, 2});
  idx.shape[0] = -4;
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx.shape[0] is -4"}));
  idx = tensor(ANYEP_INT64, {4, 2});
  idx.strides[0] = 1;
  idx.strides[1] = 4;  // column-major
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx must be contiguous"}));
  idx = tensor(ANYEP_INT64, {4, 2}, -1);
  EXPECT_TRUE(refused(ll_create(group, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx.device is -1"}));
  idx = tensor(ANYEP_INT64, {4, 2});
  EXPECT_TRUE(refused(anyep_handle_create(group, ANYEP_MODE_HT, &idx, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"high-throughput (HT) call", "cfg->mode = ANYEP_MODE_LL"}));
  EXPECT_TRUE(refused(anyep_handle_create(group, ANYEP_MODE_BOTH, &idx, nullptr, nullptr, &h),
                      ANYEP_ERR_INVALID_ARGUMENT, {"mode is ANYEP_MODE_BOTH", "a handle has one mode"}));
  anyep_ht_options_t o;
  anyep_ht_options_init(&o);
  EXPECT_TRUE(refused(anyep_handle_create(group, ANYEP_MODE_LL, &idx, &o, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"ht_options must be NULL for an ANYEP_MODE_LL handle"}));
  EXPECT_TRUE(refused(c_caller_handle_create(group, 5, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, {"mode is 5"}));
  EXPECT_EQ(h, nullptr);
}

TEST_F(GpuFree, DispatchArgumentsAreCheckedThenNoGpu) {
  auto dispatch = [&](uint32_t flags = 0, const anyep_tensor_t* scales = nullptr) {
    return ll_dispatch(handle, &x, &recv_x, scales, &recv_count, flags, nullptr);
  };
  anyep_tensor_t good_x = x;
  x.dtype = ANYEP_FLOAT32;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"x must be BFloat16, got Float"}));
  x = good_x;
  x.shape[1] = 512;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"x has hidden 512", "created with hidden 256"}));
  x = good_x;
  x.shape[0] = 3;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx has 4 rows, x has 3"}));
  x = good_x;
  x.device = 1;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"on device 1"}));
  x = good_x;
  recv_x.shape[1] = 8;
  EXPECT_TRUE(
      refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"recv_x must have shape [8, 16, 256], got [8, 8, 256]"}));
  recv_x.shape[1] = 16;
  recv_count.dtype = ANYEP_INT64;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"recv_count must be Int, got Long"}));
  recv_count.dtype = ANYEP_INT32;
  anyep_tensor_t scales = tensor(ANYEP_FLOAT32, {8, 16, 2});
  EXPECT_TRUE(refused(dispatch(0, &scales), ANYEP_ERR_INVALID_ARGUMENT, {"recv_scales must be NULL"}));
  EXPECT_TRUE(refused(dispatch(0x10), ANYEP_ERR_INVALID_ARGUMENT, {"flags has unknown bits 16"}));
  // Every argument right: the call is refused only for the missing GPU.
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_UNSUPPORTED, {"anyep_dispatch", "no GPU", "every argument check passed"}));
  EXPECT_TRUE(refused(dispatch(ANYEP_SEND_ONLY), ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
  EXPECT_TRUE(refused(anyep_complete(handle, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"nothing to complete"}));
}

TEST_F(GpuFree, CombineArgumentsAreCheckedThenNoGpu) {
  auto combine = [&] { return ll_combine(handle, &expert_x, &weights, &out, 0, nullptr); };
  expert_x.dtype = ANYEP_FLOAT8_E4M3;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"x must be BFloat16, got Float8_e4m3fn"}));
  expert_x.dtype = ANYEP_BFLOAT16;
  expert_x.shape[2] = 128;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"x has hidden 128"}));
  expert_x.shape[2] = 256;
  expert_x.shape[1] = 15;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"x must have shape [num_local_experts=8"}));
  expert_x.shape[1] = 16;
  weights.shape[1] = 3;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"topk_weights must have the shape of topk_idx [4, 2]"}));
  weights.shape[1] = 2;
  out.shape[0] = 5;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"out must have shape [4, 256], got [5, 256]"}));
  out.shape[0] = 4;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_UNSUPPORTED, {"anyep_combine", "no GPU", "every argument check passed"}));
}

TEST(CApi, DispatchOutputShapes) {
  struct Case {
    anyep_dtype_t dtype;
    uint32_t flags;
    int64_t hidden;
    anyep_dtype_t scale_dtype;
    int64_t groups;  // scale columns
  } cases[] = {{ANYEP_BFLOAT16, 0, 256, ANYEP_DTYPE_INVALID, 0},
               {ANYEP_FLOAT8_E4M3, 0, 256, ANYEP_FLOAT32, 2},
               {ANYEP_FLOAT8_E4M3, ANYEP_CONFIG_ROUND_SCALE | ANYEP_CONFIG_UE8M0, 1024, ANYEP_INT32, 2}};
  for (const Case& k : cases) {
    anyep_config_t c = gpu_free_config();
    c.dispatch_dtype = k.dtype;
    c.flags = k.flags;
    c.hidden = k.hidden;
    anyep_group_t g = nullptr;
    ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
    anyep_tensor_t rx, rs, rc;
    ASSERT_EQ(anyep_get_dispatch_outputs(g, &rx, &rs, &rc), ANYEP_SUCCESS) << anyep_get_last_error();
    EXPECT_EQ(rx.dtype, k.dtype);
    ASSERT_EQ(rx.ndim, 3);
    EXPECT_EQ(rx.shape[0], 8);
    EXPECT_EQ(rx.shape[1], 16);
    EXPECT_EQ(rx.shape[2], k.hidden);
    EXPECT_EQ(rx.strides[0], 16 * k.hidden);
    EXPECT_EQ(rx.data, nullptr);
    EXPECT_EQ(rs.dtype, k.scale_dtype);
    if (k.groups == 0) {
      EXPECT_EQ(rs.ndim, 0);
    } else {
      ASSERT_EQ(rs.ndim, 3);
      EXPECT_EQ(rs.shape[2], k.groups);
      // Column-major scales: storage [L, G, R*T].
      EXPECT_EQ(rs.strides[0], k.groups * 16);
      EXPECT_EQ(rs.strides[1], 1);
      EXPECT_EQ(rs.strides[2], 16);
    }
    EXPECT_EQ(rc.dtype, ANYEP_INT32);
    ASSERT_EQ(rc.ndim, 1);
    EXPECT_EQ(rc.shape[0], 8);
    // Any output may be left out.
    EXPECT_EQ(anyep_get_dispatch_outputs(g, nullptr, nullptr, nullptr), ANYEP_SUCCESS);
    EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS) << anyep_get_last_error();
  }
}

TEST(CApi, BothModeGroupServesBothModes) {
  anyep_config_t c = gpu_free_config();
  c.mode = ANYEP_MODE_BOTH;
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  anyep_handle_t h = nullptr, ht = nullptr;
  ASSERT_EQ(anyep_handle_create(g, ANYEP_MODE_LL, &idx, nullptr, nullptr, &h), ANYEP_SUCCESS) << anyep_get_last_error();
  ASSERT_EQ(anyep_handle_create(g, ANYEP_MODE_HT, &idx, nullptr, nullptr, &ht), ANYEP_SUCCESS)
      << anyep_get_last_error();
  anyep_mode_t m = ANYEP_MODE_BOTH;
  EXPECT_EQ(anyep_handle_get_mode(h, &m), ANYEP_SUCCESS);
  EXPECT_EQ(m, ANYEP_MODE_LL);
  EXPECT_EQ(anyep_handle_get_mode(ht, &m), ANYEP_SUCCESS);
  EXPECT_EQ(m, ANYEP_MODE_HT);
  EXPECT_TRUE(refused(anyep_handle_get_mode(ht, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"mode is NULL"}));
  EXPECT_EQ(anyep_handle_destroy(ht), ANYEP_SUCCESS);
  EXPECT_EQ(anyep_handle_destroy(h), ANYEP_SUCCESS);
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS);
}

TEST(CApi, LastErrorIsPerThread) {
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(nullptr, &g), ANYEP_ERR_INVALID_ARGUMENT);
  const std::string mine = anyep_get_last_error();
  std::string theirs_before, theirs_after;
  std::thread([&] {
    theirs_before = anyep_get_last_error();
    anyep_group_destroy(nullptr);
    theirs_after = anyep_get_last_error();
  }).join();
  EXPECT_EQ(theirs_before, "") << "a fresh thread has no last error";
  EXPECT_NE(theirs_after.find("anyep_group_destroy"), std::string::npos);
  EXPECT_EQ(std::string(anyep_get_last_error()), mine) << "another thread's failure left this thread's text alone";
}

}  // namespace
