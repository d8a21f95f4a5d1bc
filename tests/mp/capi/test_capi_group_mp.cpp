// C API groups across real processes, GPU-free (cfg->device = ANYEP_DEVICE_NONE): created and
// destroyed collectively over the built-in TCP store and over an allgather callback, with LL, HT
// or both in their mode; every rank names the rank whose configuration (mode, HT buffer) differs; a rank that never
// comes and a rank gone before destroy end in an error naming it, within the configured timeout.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "anyep/anyep.h"
#include "capi_calls.h"
#include "testkit/mp_harness.h"

namespace {

using anyep::testkit::Rank;
using anyep::testkit::run_ranks;
using anyep::testkit::RunOptions;

// The rank's GPU-free configuration over the harness's TCP rendezvous (rank 0 takes over the
// socket the harness bound; every hello carries the run's secret).
anyep_config_t tcp_config(Rank& r) {
  ::setenv("ANYEP_BOOTSTRAP_SECRET", r.secret.c_str(), 1);
  anyep_config_t c;
  anyep_config_init(&c);
  c.rank = static_cast<int32_t>(r.rank);
  c.num_ranks = static_cast<int32_t>(r.size);
  c.device = ANYEP_DEVICE_NONE;
  c.num_experts = 4 * r.size;
  c.max_tokens_per_rank = 32;
  c.hidden = 512;
  c.timeout_s = 10;
  c.bootstrap.kind = ANYEP_BOOTSTRAP_TCP;
  c.bootstrap.tcp_host = "127.0.0.1";
  c.bootstrap.tcp_port = r.port;
  c.bootstrap.tcp_listen_fd = r.rank == 0 ? r.listen_fd : -1;
  return c;
}

// A 2-D descriptor of a GPU-free group's call: its data is never read.
anyep_tensor_t fake_tensor(anyep_dtype_t dtype, int64_t a, int64_t b) {
  static unsigned char fake[64];
  anyep_tensor_t x;
  std::memset(&x, 0, sizeof x);
  x.data = fake;
  x.dtype = dtype;
  x.ndim = 2;
  x.shape[0] = a;
  x.shape[1] = b;
  return x;
}

std::string status_text(anyep_status_t s) { return std::string(anyep_status_name(s)) + ": " + anyep_get_last_error(); }

void expect_refusal(anyep_status_t got, anyep_status_t want, const std::string& text) {
  ANYEP_MP_CHECK(got == want, "got " + status_text(got) + ", expected " + anyep_status_name(want));
  const std::string m = anyep_get_last_error();
  ANYEP_MP_CHECK(m.find(text) != std::string::npos, "message '" + m + "' lacks '" + text + "'");
}

// A GPU-free group's round: a handle, a dispatch refused only for the missing GPU, destroy.
void use_and_destroy(anyep_group_t g, Rank& r) {
  const anyep_tensor_t idx = fake_tensor(ANYEP_INT64, 8, 2);
  anyep_handle_t h = nullptr;
  anyep_status_t s = ll_create(g, &idx, &h);
  ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
  anyep_tensor_t x = idx, recv_x, recv_count;
  x.dtype = ANYEP_BFLOAT16;
  x.shape[1] = 512;
  s = anyep_get_dispatch_outputs(g, &recv_x, nullptr, &recv_count);
  ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
  ANYEP_MP_CHECK(recv_x.shape[0] == 4 && recv_x.shape[1] == 32 * static_cast<int64_t>(r.size),
                 "recv_x is [L=4, R*T], got [" + std::to_string(recv_x.shape[0]) + ", " +
                     std::to_string(recv_x.shape[1]) + ", ...]");
  recv_x.data = recv_count.data = idx.data;
  expect_refusal(ll_dispatch(h, &x, &recv_x, nullptr, &recv_count, 0, nullptr), ANYEP_ERR_UNSUPPORTED, "no GPU");
  s = anyep_handle_destroy(h);
  ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
  s = anyep_group_destroy(g);
  ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
  expect_refusal(anyep_group_destroy(g), ANYEP_ERR_INVALID_ARGUMENT, "is not a live anyep group");
}

RunOptions no_bootstrap() {
  RunOptions o;
  o.bootstrap = false;  // the C API runs its own TCP store on the harness's socket
  o.timeout_s = 60;
  return o;
}

TEST(CApiGroupMp, TcpStoreCreatesAndDestroys) {
  for (uint32_t n : {1u, 2u, 4u}) {
    auto res = run_ranks(
        n,
        [](Rank& r) {
          anyep_config_t c = tcp_config(r);
          anyep_group_t g = nullptr;
          const anyep_status_t s = anyep_group_create(&c, &g);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          use_and_destroy(g, r);
        },
        no_bootstrap());
    EXPECT_TRUE(res.ok()) << "ranks " << n << "\n" << res.summary();
  }
}

// The caller's allgather: here the harness's own TCP bootstrap (a stand-in for MPI or NCCL).
int harness_allgather(const void* send, void* recv, size_t bytes, void* user) {
  auto& r = *static_cast<Rank*>(user);
  const auto* p = static_cast<const uint8_t*>(send);
  const auto all = r.boot->allgather(std::vector<uint8_t>(p, p + bytes));
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k].size() != bytes) return 1;
    std::memcpy(static_cast<uint8_t*>(recv) + k * bytes, all[k].data(), bytes);
  }
  return 0;
}
// The same, gathering in reverse rank order (a broken callback).
int reversed_allgather(const void* send, void* recv, size_t bytes, void* user) {
  auto& r = *static_cast<Rank*>(user);
  const auto* p = static_cast<const uint8_t*>(send);
  const auto all = r.boot->allgather(std::vector<uint8_t>(p, p + bytes));
  for (size_t k = 0; k < all.size(); ++k)
    std::memcpy(static_cast<uint8_t*>(recv) + (all.size() - 1 - k) * bytes, all[k].data(), bytes);
  return 0;
}

anyep_config_t callback_config(Rank& r, anyep_allgather_fn fn) {
  anyep_config_t c = tcp_config(r);
  c.bootstrap.kind = ANYEP_BOOTSTRAP_ALLGATHER;
  c.bootstrap.allgather = fn;
  c.bootstrap.allgather_user = &r;
  return c;
}

TEST(CApiGroupMp, AllgatherCallbackCreatesAndDestroys) {
  auto res = run_ranks(3, [](Rank& r) {
    anyep_config_t c = callback_config(r, harness_allgather);
    anyep_group_t g = nullptr;
    const anyep_status_t s = anyep_group_create(&c, &g);
    ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
    use_and_destroy(g, r);
  });
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(CApiGroupMp, MisorderedAllgatherIsNamed) {
  auto res = run_ranks(2, [](Rank& r) {
    anyep_config_t c = callback_config(r, reversed_allgather);
    anyep_group_t g = nullptr;
    expect_refusal(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT,
                   "allgather result does not hold this rank's contribution at index " + std::to_string(r.rank));
    ANYEP_MP_CHECK(g == nullptr, "no group after a failed create");
  });
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(CApiGroupMp, EveryRankNamesTheRankWhoseConfigurationDiffers) {
  auto res = run_ranks(
      3,
      [](Rank& r) {
        anyep_config_t c = tcp_config(r);
        if (r.rank == 2) c.hidden = 1024;
        anyep_group_t g = nullptr;
        // Every rank sees every record: the others name rank 2, rank 2 names rank 0.
        const std::string want =
            r.rank == 2 ? "rank 0 was created with hidden=512, 1024 here (rank 2)"
                        : "rank 2 was created with hidden=1024, 512 here (rank " + std::to_string(r.rank) + ")";
        expect_refusal(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT, want);
      },
      no_bootstrap());
  EXPECT_TRUE(res.ok()) << res.summary();
}

// GPU-free groups with HT in their mode: created collectively, an HT handle (every check of the
// layout and the counts exchange), its dispatch refused only for the missing GPU, destroyed.
TEST(CApiGroupMp, HtGroupsCreateAndDestroy) {
  for (anyep_mode_t mode : {ANYEP_MODE_HT, ANYEP_MODE_BOTH}) {
    auto res = run_ranks(
        3,
        [mode](Rank& r) {
          anyep_config_t c = tcp_config(r);
          c.mode = mode;
          anyep_group_t g = nullptr;
          anyep_status_t s = anyep_group_create(&c, &g);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          const anyep_tensor_t idx = fake_tensor(ANYEP_INT64, 8, 2), x = fake_tensor(ANYEP_BFLOAT16, 8, 512),
                               w = fake_tensor(ANYEP_FLOAT32, 8, 2);
          const anyep_tensor_t rx = fake_tensor(ANYEP_BFLOAT16, 5, 512), ri = fake_tensor(ANYEP_INT64, 5, 2),
                               rw = fake_tensor(ANYEP_FLOAT32, 5, 2);
          anyep_handle_t h = nullptr;
          s = ht_create(g, &idx, nullptr, nullptr, &h);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          expect_refusal(ht_dispatch(h, &x, nullptr, &w, &rx, nullptr, &ri, &rw, nullptr), ANYEP_ERR_UNSUPPORTED,
                         "no GPU");
          s = anyep_handle_destroy(h);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          s = anyep_group_destroy(g);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
        },
        no_bootstrap());
    EXPECT_TRUE(res.ok()) << "mode " << mode << "\n" << res.summary();
  }
}

TEST(CApiGroupMp, EveryRankNamesTheRankWhoseModeOrHtBufferDiffers) {
  auto res = run_ranks(
      2,
      [](Rank& r) {
        anyep_config_t c = tcp_config(r);
        c.mode = r.rank == 1 ? ANYEP_MODE_LL : ANYEP_MODE_BOTH;
        anyep_group_t g = nullptr;
        expect_refusal(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT,
                       r.rank == 1 ? "rank 0 was created with mode=ANYEP_MODE_BOTH, ANYEP_MODE_LL here (rank 1)"
                                   : "rank 1 was created with mode=ANYEP_MODE_LL, ANYEP_MODE_BOTH here (rank 0)");
      },
      no_bootstrap());
  EXPECT_TRUE(res.ok()) << res.summary();
  res = run_ranks(
      2,
      [](Rank& r) {
        anyep_config_t c = tcp_config(r);
        c.mode = ANYEP_MODE_HT;
        if (r.rank == 1) c.ht_buffer_bytes = 64 << 20;
        anyep_group_t g = nullptr;
        expect_refusal(anyep_group_create(&c, &g), ANYEP_ERR_INVALID_ARGUMENT,
                       r.rank == 1 ? "rank 0 was created with ht_buffer_bytes="
                                   : "rank 1 was created with ht_buffer_bytes=67108864");
      },
      no_bootstrap());
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(CApiGroupMp, RankThatNeverComesIsNamedWithinTheTimeout) {
  auto res = run_ranks(
      3,
      [](Rank& r) {
        if (r.rank == 1) return;  // never calls anyep_group_create
        anyep_config_t c = tcp_config(r);
        c.timeout_s = 1.5;
        anyep_group_t g = nullptr;
        const auto t0 = std::chrono::steady_clock::now();
        const anyep_status_t s = anyep_group_create(&c, &g);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ANYEP_MP_CHECK(s != ANYEP_SUCCESS, "created without rank 1");
        ANYEP_MP_CHECK(took < 10, "took " + std::to_string(took) + " s for a 1.5 s timeout");
        if (r.rank == 0) expect_refusal(s, ANYEP_ERR_TIMEOUT, "rank(s) 1 of 3 never joined");
      },
      no_bootstrap());
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(CApiGroupMp, DestroyWithARankGoneFailsNamingItAndStillFrees) {
  auto res = run_ranks(
      2,
      [](Rank& r) {
        anyep_config_t c = tcp_config(r);
        c.timeout_s = 2;
        anyep_group_t g = nullptr;
        const anyep_status_t s = anyep_group_create(&c, &g);
        ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
        if (r.rank == 1) return;  // leaves without destroying: its sockets close with the process
        const anyep_status_t d = anyep_group_destroy(g);
        ANYEP_MP_CHECK(d != ANYEP_SUCCESS, "destroy succeeded without rank 1");
        ANYEP_MP_CHECK(std::string(anyep_get_last_error()).find("rank 1") != std::string::npos,
                       "the error names rank 1: " + status_text(d));
        expect_refusal(anyep_group_destroy(g), ANYEP_ERR_INVALID_ARGUMENT, "is not a live anyep group");
      },
      no_bootstrap());
  EXPECT_TRUE(res.ok()) << res.summary();
}

}  // namespace

// GPU-free groups whose ranks form several nodes (ANYEP_HT_RANKS_PER_NODE): 2 processes as 2
// nodes, 4 as 2 nodes of 2. Created on every rank; an HT handle runs the routing's checks; the
// internode dispatch checks its inputs and outputs (a wrong topk_weights shape is named) and is
// refused only for the missing GPU, as is combine.
TEST(CApiGroupMp, HtGroupAcrossNodesChecksEveryCallWithoutGpu) {
  for (int ranks : {2, 4}) {
    auto res = run_ranks(
        ranks,
        [](Rank& r) {
          ::setenv("ANYEP_HT_RANKS_PER_NODE", r.size == 2 ? "1" : "2", 1);
          anyep_config_t c = tcp_config(r);
          c.mode = ANYEP_MODE_HT;
          anyep_group_t g = nullptr;
          anyep_status_t s = anyep_group_create(&c, &g);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          const anyep_tensor_t idx = fake_tensor(ANYEP_INT64, 8, 2), x = fake_tensor(ANYEP_BFLOAT16, 8, 512),
                               w = fake_tensor(ANYEP_FLOAT32, 8, 2);
          const anyep_tensor_t bad_w = fake_tensor(ANYEP_FLOAT32, 8, 3);
          const anyep_tensor_t rx = fake_tensor(ANYEP_BFLOAT16, 5, 512), ri = fake_tensor(ANYEP_INT64, 5, 2),
                               rw = fake_tensor(ANYEP_FLOAT32, 5, 2);
          anyep_handle_t h = nullptr;
          s = ht_create(g, &idx, nullptr, nullptr, &h);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          expect_refusal(ht_dispatch(h, &x, nullptr, &bad_w, &rx, nullptr, &ri, &rw, nullptr),
                         ANYEP_ERR_INVALID_ARGUMENT, "topk_weights must be float32 [8, 2]");
          expect_refusal(ht_dispatch(h, &x, nullptr, &w, &rx, nullptr, &ri, &rw, nullptr), ANYEP_ERR_UNSUPPORTED,
                         "no GPU");
          const anyep_tensor_t out = fake_tensor(ANYEP_BFLOAT16, 8, 512);
          expect_refusal(ht_combine(h, &rx, nullptr, &out, nullptr, nullptr), ANYEP_ERR_UNSUPPORTED, "no GPU");
          s = anyep_handle_destroy(h);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
          s = anyep_group_destroy(g);
          ANYEP_MP_CHECK(s == ANYEP_SUCCESS, status_text(s));
        },
        no_bootstrap());
    EXPECT_TRUE(res.ok()) << ranks << " ranks\n" << res.summary();
  }
}
