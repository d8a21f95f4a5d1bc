// The C API's high-throughput calls' documented refusals, on the CPU: GPU-free HT groups of one
// rank run every argument check of anyep_handle_create, anyep_dispatch and anyep_combine on HT
// handles, then refuse the data path for the missing GPU. Each case checks the status
// and that the message names the function and the argument.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "anyep/anyep.h"
#include "capi_test_util.h"

namespace {

using capi_test::refused;
using capi_test::tensor;

static_assert(offsetof(anyep_ht_options_t, struct_size) == 0, "struct_size is the first field");

anyep_config_t ht_config(anyep_mode_t mode = ANYEP_MODE_HT) { return capi_test::one_rank_config(mode); }

class HtGpuFree : public ::testing::Test {
 protected:
  void SetUp() override {
    anyep_config_t c = ht_config();
    ASSERT_EQ(anyep_group_create(&c, &group), ANYEP_SUCCESS) << anyep_get_last_error();
    ASSERT_EQ(ht_create(group, &idx, nullptr, nullptr, &handle), ANYEP_SUCCESS) << anyep_get_last_error();
  }
  void TearDown() override {
    if (handle) {
      EXPECT_EQ(anyep_handle_destroy(handle), ANYEP_SUCCESS) << anyep_get_last_error();
    }
    if (group) {
      EXPECT_EQ(anyep_group_destroy(group), ANYEP_SUCCESS) << anyep_get_last_error();
    }
  }
  anyep_status_t dispatch(const anyep_tensor_t* scales = nullptr, const anyep_tensor_t* rscales = nullptr) {
    return ht_dispatch(handle, &x, scales, &weights, &recv_x, rscales, &recv_idx, &recv_w, nullptr);
  }
  // Every argument right for the handle (N = 4 tokens, K = 2; M = 3 rows received).
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  anyep_tensor_t x = tensor(ANYEP_BFLOAT16, {4, 256});
  anyep_tensor_t weights = tensor(ANYEP_FLOAT32, {4, 2});
  anyep_tensor_t recv_x = tensor(ANYEP_BFLOAT16, {3, 256});
  anyep_tensor_t recv_idx = tensor(ANYEP_INT64, {3, 2});
  anyep_tensor_t recv_w = tensor(ANYEP_FLOAT32, {3, 2});
  anyep_tensor_t expert_x = tensor(ANYEP_BFLOAT16, {3, 256});
  anyep_tensor_t out = tensor(ANYEP_BFLOAT16, {4, 256});
  anyep_group_t group = nullptr;
  anyep_handle_t handle = nullptr;
};

TEST(CApiHt, GroupWithoutHtRefusesHtCallsByName) {
  anyep_config_t c = ht_config(ANYEP_MODE_LL);
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  anyep_handle_t h = nullptr;
  EXPECT_TRUE(refused(ht_create(g, &idx, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_handle_create", "high-throughput (HT) call", "cfg->mode = ANYEP_MODE_LL"}));
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS);
}

TEST(CApiHt, GroupWithoutLlRefusesLlCallsByName) {
  anyep_config_t c = ht_config(ANYEP_MODE_HT);
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
  anyep_handle_t h = nullptr;
  EXPECT_TRUE(refused(ll_create(g, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_handle_create", "low-latency (LL) call", "cfg->mode = ANYEP_MODE_HT"}));
  anyep_tensor_t rx;
  EXPECT_TRUE(refused(anyep_get_dispatch_outputs(g, &rx, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_get_dispatch_outputs", "cfg->mode = ANYEP_MODE_HT"}));
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS);
}

TEST(CApiHt, HtGroupTakesTheConfiguredBufferBytes) {
  // A 1-rank HT group resolves its buffer size: the configured bytes are used as given.
  anyep_config_t c = ht_config();
  c.ht_buffer_bytes = 64 << 20;
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS);
}

TEST_F(HtGpuFree, NullPointers) {
  anyep_handle_t h = reinterpret_cast<anyep_handle_t>(0x1);
  EXPECT_TRUE(refused(ht_create(nullptr, &idx, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_handle_create", "group is NULL"}));
  EXPECT_EQ(h, nullptr) << "the out handle is cleared on failure";
  EXPECT_TRUE(
      refused(ht_create(group, &idx, nullptr, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"handle is NULL"}));
  EXPECT_TRUE(
      refused(ht_create(group, nullptr, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx is NULL"}));
  EXPECT_TRUE(refused(ht_dispatch(nullptr, &x, nullptr, &weights, &recv_x, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"anyep_dispatch", "handle is NULL"}));
  EXPECT_TRUE(refused(ht_dispatch(handle, nullptr, nullptr, &weights, &recv_x, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"x is NULL"}));
  EXPECT_TRUE(refused(ht_dispatch(handle, &x, nullptr, nullptr, &recv_x, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"topk_weights is NULL"}));
  EXPECT_TRUE(refused(ht_dispatch(handle, &x, nullptr, &weights, nullptr, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"recv_x is NULL"}));
  EXPECT_TRUE(refused(ht_dispatch(handle, &x, nullptr, &weights, &recv_x, nullptr, nullptr, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"recv_topk_idx is NULL"}));
  EXPECT_TRUE(refused(ht_dispatch(handle, &x, nullptr, &weights, &recv_x, nullptr, &recv_idx, nullptr, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"recv_topk_weights is NULL"}));
  EXPECT_TRUE(refused(ht_combine(nullptr, &expert_x, nullptr, &out, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_combine", "handle is NULL"}));
  EXPECT_TRUE(
      refused(ht_combine(handle, nullptr, nullptr, &out, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"x is NULL"}));
  EXPECT_TRUE(refused(ht_combine(handle, &expert_x, nullptr, nullptr, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"out is NULL"}));
  EXPECT_TRUE(refused(anyep_ht_get_recv_counts(handle, nullptr, nullptr, 0), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_ht_get_recv_counts", "num_recv is NULL"}));
  EXPECT_TRUE(
      refused(anyep_ht_get_recv_counts(nullptr, nullptr, nullptr, 0), ANYEP_ERR_INVALID_ARGUMENT, {"handle is NULL"}));
  EXPECT_TRUE(refused(anyep_ht_get_dispatch_outputs(nullptr, nullptr, nullptr, nullptr, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"anyep_ht_get_dispatch_outputs", "handle is NULL"}));
}

TEST_F(HtGpuFree, OptionsAreVersionedAndChecked) {
  anyep_ht_options_t o;
  anyep_handle_t h = nullptr;
  auto create = [&] { return ht_create(group, &idx, &o, nullptr, &h); };
  anyep_ht_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof o);
  ASSERT_EQ(create(), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_EQ(anyep_handle_destroy(h), ANYEP_SUCCESS);
  o.struct_size = 0;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_handle_create", "options->struct_size is 0"}));
  // A newer header's struct: accepted with the unknown tail zero, refused with it set.
  struct Newer {
    anyep_ht_options_t v1;
    int64_t future;
  } n;
  std::memset(&n, 0, sizeof n);
  anyep_ht_options_init(&n.v1);
  n.v1.struct_size = sizeof n;
  ASSERT_EQ(ht_create(group, &idx, &n.v1, nullptr, &h), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_EQ(anyep_handle_destroy(h), ANYEP_SUCCESS);
  n.future = 1;
  EXPECT_TRUE(refused(ht_create(group, &idx, &n.v1, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"does not know", "newer anyep.h"}));
  anyep_ht_options_init(&o);
  o.num_sms = 7;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"options->num_sms is 7", "even"}));
  o.num_sms = -2;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"options->num_sms is -2"}));
  anyep_ht_options_init(&o);
  o.dispatch_chunk_send = -1;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"options->dispatch_chunk_send is -1"}));
  anyep_ht_options_init(&o);
  o.combine_chunk_recv = 1;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"options->combine_chunk_recv is 1", ">= 2"}));
  anyep_ht_options_init(&o);
  o.expert_alignment = -4;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"options->expert_alignment is -4"}));
  // More SMs than the default-sized buffer holds: named with the bytes it needs.
  anyep_ht_options_init(&o);
  o.num_sms = 64;
  EXPECT_TRUE(refused(create(), ANYEP_ERR_INVALID_ARGUMENT, {"options->num_sms=64", "cfg->ht_buffer_bytes"}));
  EXPECT_EQ(h, nullptr);
}

TEST_F(HtGpuFree, TopkIdxPastTheGroupsLimits) {
  anyep_handle_t h = nullptr;
  anyep_tensor_t t = tensor(ANYEP_INT64, {17, 2});
  EXPECT_TRUE(refused(ht_create(group, &t, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"topk_idx has 17 tokens", "max_tokens_per_rank=16"}));
  t = tensor(ANYEP_INT32, {4, 2});
  EXPECT_TRUE(refused(ht_create(group, &t, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"topk_idx must be Long, got Int"}));
  t = tensor(ANYEP_INT64, {4, 17});
  EXPECT_TRUE(refused(ht_create(group, &t, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"topk_idx has 17 columns", "[1, 16]"}));
  t = tensor(ANYEP_INT64, {4, 2});
  const int32_t v = 99;  // the bits only: C++ may not load an anyep_dtype_t of 99
  std::memcpy(&t.dtype, &v, sizeof v);
  EXPECT_TRUE(
      refused(ht_create(group, &t, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT, {"topk_idx.dtype is 99"}));
  EXPECT_EQ(h, nullptr);
}

TEST_F(HtGpuFree, DispatchArgumentsAreCheckedThenNoGpu) {
  const anyep_tensor_t good_x = x;
  x.dtype = ANYEP_FLOAT32;
  EXPECT_TRUE(
      refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"x is ANYEP_FLOAT32", "dispatch_dtype is ANYEP_BFLOAT16"}));
  x = good_x;
  x.shape[1] = 512;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"x has hidden 512", "created with hidden 256"}));
  x = good_x;
  x.shape[0] = 3;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"x has 3 rows", "topk_idx 4"}));
  x = good_x;
  anyep_tensor_t scales = tensor(ANYEP_FLOAT32, {4, 2});
  EXPECT_TRUE(refused(dispatch(&scales), ANYEP_ERR_INVALID_ARGUMENT, {"x_scales must be NULL"}));
  EXPECT_TRUE(refused(dispatch(nullptr, &scales), ANYEP_ERR_INVALID_ARGUMENT, {"recv_scales must be NULL"}));
  weights.shape[1] = 3;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"topk_weights", "[4, num_topk]"}));
  weights.shape[1] = 2;
  recv_x.shape[0] = 17;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"recv_x has 17 rows", "= 16"}));
  recv_x.shape[0] = 3;
  recv_idx.dtype = ANYEP_INT32;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"recv_topk_idx"}));
  recv_idx.dtype = ANYEP_INT64;
  recv_w.shape[0] = 2;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"recv_topk_weights"}));
  recv_w.shape[0] = 3;
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_UNSUPPORTED, {"anyep_dispatch", "no GPU", "every argument check passed"}));
  // No counts without a GPU.
  int64_t m = -1;
  int32_t per_expert[8];
  EXPECT_TRUE(refused(anyep_ht_get_recv_counts(handle, &m, per_expert, 8), ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
  EXPECT_TRUE(refused(anyep_ht_get_recv_counts(handle, &m, per_expert, 7), ANYEP_ERR_INVALID_ARGUMENT,
                      {"per_expert_len is 7", "8 local experts"}));
  anyep_tensor_t rx;
  EXPECT_TRUE(refused(anyep_ht_get_dispatch_outputs(handle, &rx, nullptr, nullptr, nullptr), ANYEP_ERR_UNSUPPORTED,
                      {"no GPU"}));
}

TEST_F(HtGpuFree, CombineArgumentsAreCheckedThenNoGpu) {
  auto combine = [&](const anyep_tensor_t* w = nullptr, const anyep_tensor_t* ow = nullptr) {
    return ht_combine(handle, &expert_x, w, &out, ow, nullptr);
  };
  expert_x.dtype = ANYEP_FLOAT8_E4M3;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"x must be BFloat16"}));
  expert_x.dtype = ANYEP_BFLOAT16;
  expert_x.shape[1] = 128;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"x has hidden 128"}));
  expert_x.shape[1] = 256;
  expert_x.shape[0] = 40;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"x has 40 rows", "= 16"}));
  expert_x.shape[0] = 3;
  out.shape[0] = 5;
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_INVALID_ARGUMENT, {"out must have shape [4, 256], got [5, 256]"}));
  out.shape[0] = 4;
  anyep_tensor_t w = tensor(ANYEP_FLOAT32, {3, 2}), ow = tensor(ANYEP_FLOAT32, {4, 2});
  EXPECT_TRUE(refused(combine(nullptr, &ow), ANYEP_ERR_INVALID_ARGUMENT, {"out_topk_weights must be NULL"}));
  EXPECT_TRUE(refused(combine(&w), ANYEP_ERR_INVALID_ARGUMENT, {"out_topk_weights is NULL"}));
  ow.shape[1] = 3;
  EXPECT_TRUE(refused(combine(&w, &ow), ANYEP_ERR_INVALID_ARGUMENT, {"out_topk_weights"}));
  ow.shape[1] = 2;
  EXPECT_TRUE(
      refused(combine(&w, &ow), ANYEP_ERR_UNSUPPORTED, {"anyep_combine", "no GPU", "every argument check passed"}));
  EXPECT_TRUE(refused(combine(), ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
}

TEST_F(HtGpuFree, ArgsOfTheOtherModeAreRefusedByName) {
  anyep_config_t c = ht_config(ANYEP_MODE_BOTH);
  anyep_group_t g = nullptr;
  ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
  anyep_handle_t ll = nullptr;
  ASSERT_EQ(ll_create(g, &idx, &ll), ANYEP_SUCCESS) << anyep_get_last_error();
  // HT args on an LL handle, LL args on an HT handle: the args' mode names both.
  EXPECT_TRUE(refused(ht_dispatch(ll, &x, nullptr, &weights, &recv_x, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_dispatch", "args->mode is ANYEP_MODE_HT", "an LL handle (created with ANYEP_MODE_LL)",
                       "anyep_dispatch_args_init(&args, ANYEP_MODE_LL)"}));
  EXPECT_TRUE(refused(ht_combine(ll, &expert_x, nullptr, &out, nullptr, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_combine", "args->mode is ANYEP_MODE_HT", "anyep_combine_args_init"}));
  anyep_tensor_t rc = tensor(ANYEP_INT32, {8});
  anyep_tensor_t rx = tensor(ANYEP_BFLOAT16, {8, 16, 256});
  EXPECT_TRUE(refused(ll_dispatch(handle, &x, &rx, nullptr, &rc, 0, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                      {"args->mode is ANYEP_MODE_LL", "an HT handle (created with ANYEP_MODE_HT)"}));
  EXPECT_TRUE(
      refused(anyep_complete(handle, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_complete takes an LL handle"}));

  // A field of the other mode left set, flags on an HT call.
  anyep_dispatch_args_t d;
  anyep_dispatch_args_init(&d, ANYEP_MODE_HT);
  d.x = &x;
  d.topk_weights = &weights;
  d.recv_x = &recv_x;
  d.recv_topk_idx = &recv_idx;
  d.recv_topk_weights = &recv_w;
  d.recv_count = &rc;
  EXPECT_TRUE(refused(anyep_dispatch(handle, &d), ANYEP_ERR_INVALID_ARGUMENT,
                      {"args->recv_count is set", "an HT handle does not take it"}));
  d.recv_count = nullptr;
  d.flags = ANYEP_SEND_ONLY;
  EXPECT_TRUE(refused(anyep_dispatch(handle, &d), ANYEP_ERR_INVALID_ARGUMENT, {"args->flags is 1", "takes no flags"}));
  d.flags = 0;
  anyep_combine_args_t cb;
  anyep_combine_args_init(&cb, ANYEP_MODE_LL);
  cb.out_topk_weights = &out;
  EXPECT_TRUE(refused(anyep_combine(ll, &cb), ANYEP_ERR_INVALID_ARGUMENT,
                      {"args->out_topk_weights is set", "an LL handle does not take it"}));

  // The args pointer and struct size, which only the C boundary can check.
  EXPECT_TRUE(refused(anyep_dispatch(handle, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_dispatch", "args is NULL"}));
  EXPECT_TRUE(refused(anyep_combine(ll, nullptr), ANYEP_ERR_INVALID_ARGUMENT, {"anyep_combine", "args is NULL"}));
  d.struct_size = 8;
  EXPECT_TRUE(refused(anyep_dispatch(handle, &d), ANYEP_ERR_INVALID_ARGUMENT,
                      {"args->struct_size is 8", "anyep_dispatch_args_t", "anyep_dispatch_args_init()"}));
  struct Newer {
    anyep_dispatch_args_t v1;
    uint64_t future_field;
  } n;
  n.v1 = d;
  n.v1.struct_size = sizeof n;
  n.future_field = 1;
  EXPECT_TRUE(refused(anyep_dispatch(handle, &n.v1), ANYEP_ERR_INVALID_ARGUMENT, {"a newer anyep.h"}));
  n.future_field = 0;  // a newer struct with the unknown tail unset: the call goes on to the GPU refusal
  EXPECT_TRUE(refused(anyep_dispatch(handle, &n.v1), ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
  EXPECT_EQ(anyep_handle_destroy(ll), ANYEP_SUCCESS);
  EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS);
}

// The deprecated HT-only names still work: wrappers of the mode-generic calls.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(HtGpuFree, DeprecatedHtNamesStillWork) {
  anyep_handle_t h = nullptr;
  ASSERT_EQ(anyep_handle_destroy(handle), ANYEP_SUCCESS);
  handle = nullptr;
  ASSERT_EQ(anyep_ht_handle_create(group, &idx, nullptr, nullptr, &h), ANYEP_SUCCESS) << anyep_get_last_error();
  anyep_mode_t m = ANYEP_MODE_LL;
  EXPECT_EQ(anyep_handle_get_mode(h, &m), ANYEP_SUCCESS);
  EXPECT_EQ(m, ANYEP_MODE_HT);
  EXPECT_TRUE(refused(anyep_ht_dispatch(h, &x, nullptr, &weights, &recv_x, nullptr, &recv_idx, nullptr, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"recv_topk_weights is NULL"}));
  EXPECT_TRUE(refused(anyep_ht_dispatch(h, &x, nullptr, &weights, &recv_x, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
  EXPECT_TRUE(
      refused(anyep_ht_combine(h, &expert_x, nullptr, &out, nullptr, nullptr), ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
  handle = h;
}
#pragma GCC diagnostic pop

TEST_F(HtGpuFree, DoubleDestroyAndStaleHandles) {
  anyep_handle_t h = nullptr;
  ASSERT_EQ(ht_create(group, &idx, nullptr, nullptr, &h), ANYEP_SUCCESS) << anyep_get_last_error();
  EXPECT_EQ(anyep_handle_destroy(h), ANYEP_SUCCESS);
  EXPECT_TRUE(refused(anyep_handle_destroy(h), ANYEP_ERR_INVALID_ARGUMENT,
                      {"anyep_handle_destroy", "is not a live anyep handle"}));
  EXPECT_TRUE(refused(ht_dispatch(h, &x, nullptr, &weights, &recv_x, nullptr, &recv_idx, &recv_w, nullptr),
                      ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep handle"}));
  // The group destroyed under a live handle: its calls are refused, naming the group.
  EXPECT_EQ(anyep_group_destroy(group), ANYEP_SUCCESS);
  EXPECT_TRUE(refused(dispatch(), ANYEP_ERR_INVALID_ARGUMENT, {"the handle's group was destroyed"}));
  EXPECT_TRUE(
      refused(ht_create(group, &idx, nullptr, nullptr, &h), ANYEP_ERR_INVALID_ARGUMENT, {"is not a live anyep group"}));
  group = nullptr;
}

TEST(CApiHt, Fp8DispatchTakesScalesOfTheGroupsKind) {
  struct Case {
    uint32_t flags;
    int64_t hidden;
    anyep_dtype_t scale_dtype;
    int64_t cols;
  } cases[] = {{0, 256, ANYEP_FLOAT32, 2}, {ANYEP_CONFIG_ROUND_SCALE | ANYEP_CONFIG_UE8M0, 1024, ANYEP_INT32, 2}};
  for (const Case& k : cases) {
    anyep_config_t c = ht_config();
    c.dispatch_dtype = ANYEP_FLOAT8_E4M3;
    c.flags = k.flags;
    c.hidden = k.hidden;
    anyep_group_t g = nullptr;
    anyep_handle_t h = nullptr;
    ASSERT_EQ(anyep_group_create(&c, &g), ANYEP_SUCCESS) << anyep_get_last_error();
    anyep_tensor_t idx = tensor(ANYEP_INT64, {4, 2});
    ASSERT_EQ(ht_create(g, &idx, nullptr, nullptr, &h), ANYEP_SUCCESS) << anyep_get_last_error();
    anyep_tensor_t x = tensor(ANYEP_FLOAT8_E4M3, {4, k.hidden}), w = tensor(ANYEP_FLOAT32, {4, 2});
    anyep_tensor_t rx = tensor(ANYEP_FLOAT8_E4M3, {3, k.hidden}), ri = tensor(ANYEP_INT64, {3, 2}),
                   rw = tensor(ANYEP_FLOAT32, {3, 2});
    anyep_tensor_t s = tensor(k.scale_dtype, {4, k.cols}), rs = tensor(k.scale_dtype, {3, k.cols});
    EXPECT_TRUE(refused(ht_dispatch(h, &x, nullptr, &w, &rx, &rs, &ri, &rw, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                        {"x_scales is NULL"}));
    anyep_tensor_t wrong = s;
    wrong.dtype = k.scale_dtype == ANYEP_FLOAT32 ? ANYEP_INT32 : ANYEP_FLOAT32;
    EXPECT_TRUE(refused(ht_dispatch(h, &x, &wrong, &w, &rx, &rs, &ri, &rw, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                        {"x_scales must be"}));
    wrong = s;
    wrong.shape[1] = k.cols + 1;
    EXPECT_TRUE(refused(ht_dispatch(h, &x, &wrong, &w, &rx, &rs, &ri, &rw, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                        {"x_scales has", "columns"}));
    EXPECT_TRUE(refused(ht_dispatch(h, &x, &s, &w, &rx, nullptr, &ri, &rw, nullptr), ANYEP_ERR_INVALID_ARGUMENT,
                        {"recv_scales is NULL"}));
    // Column-major scales (as DeepEP's tests pass them) are accepted.
    s.strides[0] = 1;
    s.strides[1] = 4;
    EXPECT_TRUE(refused(ht_dispatch(h, &x, &s, &w, &rx, &rs, &ri, &rw, nullptr), ANYEP_ERR_UNSUPPORTED, {"no GPU"}));
    EXPECT_EQ(anyep_handle_destroy(h), ANYEP_SUCCESS);
    EXPECT_EQ(anyep_group_destroy(g), ANYEP_SUCCESS);
  }
}

}  // namespace
