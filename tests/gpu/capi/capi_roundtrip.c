/* anyep/tests/gpu/capi/capi_roundtrip.c — the C API (<anyep/anyep.h>) end to end, as a C99 program.
 *
 * The ranks are forked processes on this machine; they meet over anyep's built-in TCP store (the
 * parent binds 127.0.0.1:0 and hands rank 0 the socket, so no port can be taken in between).
 *
 *   --part cpu   needs no GPU: the documented refusals (NULL pointers, a wrong struct size, a bad
 *                dtype, a shape past the group's limits, the other mode's calls, double destroy),
 *                then GPU-free groups of both modes (cfg.device = ANYEP_DEVICE_NONE) created and
 *                destroyed across the processes, each rank's LL and HT dispatch refused only for
 *                the missing GPU.
 *   --part gpu   LL dispatch and combine across the processes (rank r on GPU r % GPUs): BF16
 *                dispatch (every received row matched to its source token and compared exactly),
 *                combine of per-expert scaled outputs (every output value compared exactly with a
 *                host reference), the same staged (ANYEP_SEND_ONLY + anyep_complete), and an FP8
 *                dispatch (every value within FP8 rounding of its token); then high-throughput
 *                (HT, intranode) in a group of mode HT: the received counts per expert, dispatch
 *                (every row in source order, its values, local expert ids and weights exact) and
 *                combine (every value and weight exact against a host reference), twice, and an
 *                FP8 HT dispatch (bytes and column-major scales moved exactly). Exits 77,
 *                printing "no GPU", where no GPU is visible (or the program was built without CUDA).
 *   --part ht    the HT rounds of the GPU part alone. With ANYEP_HT_RANKS_PER_NODE=k (emulated
 *                nodes of k ranks) they run anyep's internode path: the rail exchange through the
 *                CPU proxy (ANYEP_HT_NET_PATH, e.g. libfabric with ANYEP_FI_PROVIDER=shm) between
 *                nodes, then the intranode kernels inside each; the expected order of the received
 *                rows follows k (docs/ht.md, "Internode").
 *   --part all   cpu and gpu (default).
 *
 * Exit status: 0 passed, 1 a check failed, 2 bad command line, 77 the GPU part could not run.
 * Build: tests/gpu/capi/CMakeLists.txt (target capi_roundtrip), or against an installed anyep
 *   cc -std=c99 capi_roundtrip.c $(pkg-config --cflags --libs anyep) [-DANYEP_ROUNDTRIP_CUDA -lcudart]
 */
#define _POSIX_C_SOURCE 200809L

#include <anyep/anyep.h>
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capi_calls.h" /* the handle calls with their arguments in a row */

#ifdef ANYEP_ROUNDTRIP_CUDA
#include <cuda_runtime_api.h>
#endif

#define EXIT_SKIP 77

typedef struct options {
  int ranks;      /* processes */
  int tokens;     /* T = tokens per rank (every rank sends T) */
  int hidden;     /* H */
  int local;      /* L = experts per rank */
  int topk;       /* K */
  double timeout; /* seconds for the whole part */
  const char* part;
} options;

/* ---- small helpers ----------------------------------------------------------------------------- */

static int g_rank = -1; /* the child's rank in its messages; -1 in the parent */

static void say(const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (g_rank >= 0)
    printf("capi_roundtrip rank %d: %s\n", g_rank, line);
  else
    printf("capi_roundtrip: %s\n", line);
  fflush(stdout);
}

/* A strict integer option: the whole text, base 10, in [lo, hi]. */
static int parse_int(const char* name, const char* text, long lo, long hi, int* out) {
  char* end = NULL;
  long v;
  errno = 0;
  v = strtol(text, &end, 10);
  if (*text == 0 || *end != 0 || errno != 0 || v < lo || v > hi) {
    fprintf(stderr, "capi_roundtrip: %s='%s' is not an integer in [%ld, %ld]\n", name, text, lo, hi);
    return 0;
  }
  *out = (int)v;
  return 1;
}

/* Expects `got` == `want` and a message containing `text`; prints what was shown. */
static int expect_status(const char* what, anyep_status_t got, anyep_status_t want, const char* text) {
  const char* msg = anyep_get_last_error();
  if (got != want) {
    say("FAILED: %s: %s, expected %s (%s)", what, anyep_status_name(got), anyep_status_name(want), msg);
    return 0;
  }
  if (want != ANYEP_SUCCESS && (msg == NULL || strstr(msg, text) == NULL)) {
    say("FAILED: %s: message '%s' lacks '%s'", what, msg ? msg : "(null)", text);
    return 0;
  }
  if (want != ANYEP_SUCCESS) say("ok: %s -> %s: %s", what, anyep_status_name(got), msg);
  return 1;
}

/* ---- the CPU part -------------------------------------------------------------------------------- */

static int allgather_self(const void* send, void* recv, size_t bytes, void* user) {
  (void)user;
  memcpy(recv, send, bytes);
  return 0;
}

static anyep_tensor_t tensor2(void* data, anyep_dtype_t dtype, int64_t a, int64_t b, int device) {
  anyep_tensor_t t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = 2;
  t.shape[0] = a;
  t.shape[1] = b;
  t.device = device;
  return t;
}

/* The documented refusals, in this process (a GPU-free group of one rank). */
static int refusals(const options* o) {
  static int64_t fake[16];
  anyep_config_t cfg;
  anyep_group_t g = NULL;
  anyep_handle_t h = NULL;
  anyep_tensor_t idx;
  int ok = 1;

  anyep_config_init(&cfg);
  cfg.device = ANYEP_DEVICE_NONE;
  cfg.num_experts = o->local;
  cfg.max_tokens_per_rank = o->tokens;
  cfg.hidden = o->hidden;
  cfg.bootstrap.kind = ANYEP_BOOTSTRAP_ALLGATHER;
  cfg.bootstrap.allgather = allgather_self;

  ok &= expect_status("NULL config", anyep_group_create(NULL, &g), ANYEP_ERR_INVALID_ARGUMENT, "cfg is NULL");
  cfg.struct_size = 0;
  ok &= expect_status("struct_size 0", anyep_group_create(&cfg, &g), ANYEP_ERR_INVALID_ARGUMENT, "struct_size");
  cfg.struct_size = sizeof cfg;
  cfg.dispatch_dtype = ANYEP_INT32;
  ok &=
      expect_status("dispatch dtype int32", anyep_group_create(&cfg, &g), ANYEP_ERR_INVALID_ARGUMENT, "dispatch_dtype");
  cfg.dispatch_dtype = ANYEP_BFLOAT16;
  cfg.mode = ANYEP_MODE_HT;
  cfg.ht_buffer_bytes = 4096;
  ok &= expect_status("HT buffer below its control data", anyep_group_create(&cfg, &g), ANYEP_ERR_INVALID_ARGUMENT,
                      "ht_buffer_bytes");
  cfg.ht_buffer_bytes = 0;
  cfg.mode = ANYEP_MODE_LL;
  cfg.hidden = o->hidden + 1;
  ok &=
      expect_status("hidden not a multiple of 128", anyep_group_create(&cfg, &g), ANYEP_ERR_INVALID_ARGUMENT, "hidden");
  cfg.hidden = o->hidden;
  if (!expect_status("GPU-free group", anyep_group_create(&cfg, &g), ANYEP_SUCCESS, "")) return 0;

  idx = tensor2(fake, ANYEP_INT64, o->tokens + 1, o->topk, 0);
  ok &= expect_status("topk_idx past max_tokens_per_rank", ll_create(g, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      "max_tokens_per_rank");
  idx = tensor2(fake, ANYEP_FLOAT32, 1, o->topk, 0);
  ok &=
      expect_status("topk_idx of float32", ll_create(g, &idx, &h), ANYEP_ERR_INVALID_ARGUMENT, "topk_idx must be Long");
  ok &= expect_status("NULL topk_idx", ll_create(g, NULL, &h), ANYEP_ERR_INVALID_ARGUMENT, "topk_idx is NULL");
  idx = tensor2(fake, ANYEP_INT64, 1, o->topk, 0);
  ok &= expect_status("HT handle in an LL group", ht_create(g, &idx, NULL, NULL, &h), ANYEP_ERR_INVALID_ARGUMENT,
                      "cfg->mode = ANYEP_MODE_LL");
  if (!expect_status("handle", ll_create(g, &idx, &h), ANYEP_SUCCESS, "")) return 0;
  ok &= expect_status("complete with nothing staged", anyep_complete(h, NULL), ANYEP_ERR_INVALID_ARGUMENT,
                      "nothing to complete");
  ok &= expect_status("handle destroy", anyep_handle_destroy(h), ANYEP_SUCCESS, "");
  ok &= expect_status("handle destroyed twice", anyep_handle_destroy(h), ANYEP_ERR_INVALID_ARGUMENT, "not a live");
  ok &= expect_status("group destroy", anyep_group_destroy(g), ANYEP_SUCCESS, "");
  ok &= expect_status("group destroyed twice", anyep_group_destroy(g), ANYEP_ERR_INVALID_ARGUMENT, "not a live");
  return ok;
}

/* ---- ranks as processes ------------------------------------------------------------------------- */

typedef int (*rank_fn)(const options* o, int rank, uint16_t port, int listen_fd);

/* A listening socket on 127.0.0.1 with a port the kernel picked. */
static int listen_any(uint16_t* port) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs fn as o->ranks processes; returns 0 all passed, EXIT_SKIP all skipped, 1 otherwise. */
static int run_ranks(const options* o, const char* what, rank_fn fn) {
  pid_t pids[64];
  int status[64];
  int r, left, failed = 0, skipped = 0;
  uint16_t port = 0;
  int fd = listen_any(&port);
  double deadline = now_s() + o->timeout;
  if (fd < 0) {
    say("FAILED: cannot listen on 127.0.0.1: %s", strerror(errno));
    return 1;
  }
  fflush(stdout);
  for (r = 0; r < o->ranks; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) {
      say("FAILED: fork: %s", strerror(errno));
      for (left = 0; left < r; ++left) kill(pids[left], SIGKILL);
      close(fd);
      return 1;
    }
    if (pids[r] == 0) {
      int rc;
      g_rank = r;
      if (r != 0) close(fd);
      rc = fn(o, r, port, r == 0 ? fd : -1);
      fflush(stdout);
      _exit(rc);
    }
    status[r] = -1;
  }
  close(fd); /* rank 0 has its own copy */
  for (left = o->ranks; left > 0;) {
    for (r = 0; r < o->ranks; ++r) {
      int st;
      if (status[r] != -1 || waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      --left;
    }
    if (left == 0) break;
    if (now_s() > deadline) {
      for (r = 0; r < o->ranks; ++r)
        if (status[r] == -1) {
          say("FAILED: %s: rank %d did not finish within %.0f s (killed)", what, r, o->timeout);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          status[r] = 1;
        }
      break;
    }
    {
      const struct timespec tick = {0, 10 * 1000 * 1000};
      nanosleep(&tick, NULL);
    }
  }
  for (r = 0; r < o->ranks; ++r) {
    if (status[r] == EXIT_SKIP)
      ++skipped;
    else if (status[r] != 0) {
      ++failed;
      say("%s: rank %d exited with status %d", what, r, status[r]);
    }
  }
  if (failed) return 1;
  return skipped == o->ranks ? EXIT_SKIP : (skipped ? 1 : 0);
}

static void tcp_bootstrap(anyep_config_t* cfg, int rank, uint16_t port, int listen_fd) {
  cfg->bootstrap.kind = ANYEP_BOOTSTRAP_TCP;
  cfg->bootstrap.tcp_host = "127.0.0.1";
  cfg->bootstrap.tcp_port = port;
  cfg->bootstrap.tcp_listen_fd = rank == 0 ? listen_fd : -1;
}

/* One rank of the CPU part: a GPU-free group across the processes. */
static int gpu_free_rank(const options* o, int rank, uint16_t port, int listen_fd) {
  static int64_t fake[16];
  anyep_config_t cfg;
  anyep_group_t g = NULL;
  anyep_handle_t h = NULL;
  anyep_handle_t ht = NULL;
  anyep_tensor_t idx, x, recv_x, recv_count, wt, ht_rx, ht_ri, ht_rw;
  int ok = 1;
  anyep_config_init(&cfg);
  cfg.mode = ANYEP_MODE_BOTH;
  cfg.rank = rank;
  cfg.num_ranks = o->ranks;
  cfg.device = ANYEP_DEVICE_NONE;
  cfg.num_experts = (int64_t)o->local * o->ranks;
  cfg.max_tokens_per_rank = o->tokens;
  cfg.hidden = o->hidden;
  cfg.timeout_s = o->timeout;
  tcp_bootstrap(&cfg, rank, port, listen_fd);
  if (!expect_status("GPU-free group over the TCP store", anyep_group_create(&cfg, &g), ANYEP_SUCCESS, "")) return 1;
  idx = tensor2(fake, ANYEP_INT64, o->tokens, o->topk, 0);
  if (!expect_status("handle", ll_create(g, &idx, &h), ANYEP_SUCCESS, "")) return 1;
  x = tensor2(fake, ANYEP_BFLOAT16, o->tokens, o->hidden, 0);
  ok &= expect_status("outputs", anyep_get_dispatch_outputs(g, &recv_x, NULL, &recv_count), ANYEP_SUCCESS, "");
  recv_x.data = recv_count.data = fake;
  ok &= recv_x.shape[1] == (int64_t)o->ranks * o->tokens;
  ok &= expect_status("dispatch in a GPU-free group", ll_dispatch(h, &x, &recv_x, NULL, &recv_count, 0, NULL),
                      ANYEP_ERR_UNSUPPORTED, "no GPU");
  ok &= expect_status("handle destroy", anyep_handle_destroy(h), ANYEP_SUCCESS, "");
  /* The group's HT side: an HT handle (every check of the layout and the counts exchange), a
   * dispatch refused only for the missing GPU. */
  if (!expect_status("HT handle", ht_create(g, &idx, NULL, NULL, &ht), ANYEP_SUCCESS, "")) return 1;
  wt = tensor2(fake, ANYEP_FLOAT32, o->tokens, o->topk, 0);
  ht_rx = tensor2(fake, ANYEP_BFLOAT16, o->tokens, o->hidden, 0);
  ht_ri = tensor2(fake, ANYEP_INT64, o->tokens, o->topk, 0);
  ht_rw = tensor2(fake, ANYEP_FLOAT32, o->tokens, o->topk, 0);
  ok &= expect_status("HT dispatch in a GPU-free group",
                      ht_dispatch(ht, &x, NULL, &wt, &ht_rx, NULL, &ht_ri, &ht_rw, NULL), ANYEP_ERR_UNSUPPORTED,
                      "no GPU");
  ok &= expect_status("HT handle destroy", anyep_handle_destroy(ht), ANYEP_SUCCESS, "");
  ok &= expect_status("HT handle destroyed twice", anyep_handle_destroy(ht), ANYEP_ERR_INVALID_ARGUMENT, "not a live");
  ok &= expect_status("group destroy (collective)", anyep_group_destroy(g), ANYEP_SUCCESS, "");
  if (ok) say("GPU-free group (LL and HT) of %d ranks created, used and destroyed", o->ranks);
  return ok ? 0 : 1;
}

/* ---- the GPU part -------------------------------------------------------------------------------- */

#ifdef ANYEP_ROUNDTRIP_CUDA

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- the routing every rank can recompute for every rank ---------------------------------------- */

/* Token t of rank r: element 0 = r + 1, element 1 = t + 1 (so a received row names its source),
 * the rest multiples of 1/8 in [-2, 2]: every value is exact in BF16. */
static float x_value(int r, int t, int h) {
  if (h == 0) return (float)(r + 1);
  if (h == 1) return (float)(t + 1);
  return (float)((r * 131 + t * 31 + h * 7) % 33 - 16) / 8.0f;
}

/* topk of token t of rank r: K distinct experts of E (a seeded shuffle), some slots -1. */
static void topk_of(int r, int t, int K, int E, int64_t* out) {
  uint32_t s = 2654435761u * (uint32_t)(r * 1000003 + t + 1);
  int k, i;
  for (k = 0; k < K; ++k) {
    int64_t e;
    int dup;
    do {
      s = s * 1664525u + 1013904223u;
      e = (int64_t)((s >> 8) % (uint32_t)E);
      dup = 0;
      for (i = 0; i < k; ++i) dup |= out[i] == e;
    } while (dup);
    out[k] = e;
  }
  if ((r + t) % 5 == 1) out[(t % K)] = -1; /* "no expert" entries */
}

static float weight_of(int t, int k) { return (float)(1 + (t + k) % 4) / 4.0f; }
/* Expert e multiplies its rows by 1 + e % 3 (exact in BF16 for these values). */
static float expert_scale(int64_t e) { return (float)(1 + e % 3); }

#define CUDA_OK(call)                                       \
  do {                                                      \
    cudaError_t e_ = (call);                                \
    if (e_ != cudaSuccess) {                                \
      say("FAILED: %s: %s", #call, cudaGetErrorString(e_)); \
      return 1;                                             \
    }                                                       \
  } while (0)
#define ANYEP_OK(call)                                                                 \
  do {                                                                                 \
    anyep_status_t s_ = (call);                                                        \
    if (s_ != ANYEP_SUCCESS) {                                                         \
      say("FAILED: %s: %s: %s", #call, anyep_status_name(s_), anyep_get_last_error()); \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

static int64_t numel(const anyep_tensor_t* t) {
  int64_t n = 1;
  int d;
  for (d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

/* e4m3 (bias 7, no infinities) to float. */
static float from_e4m3(uint8_t b) {
  int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
  return s ? -v : v;
}

typedef struct world {
  int R, T, H, L, K, E, rank;
  int node_ranks; /* HT: ranks per node (ANYEP_HT_RANKS_PER_NODE, else all ranks on one node) */
  int64_t* idx;   /* [R][T][K] every rank's routing */
  uint16_t* xs;   /* [R][T][H] every rank's tokens (BF16) */
} world;

static int token_goes_to(const world* w, int r, int t, int64_t e) {
  int k;
  for (k = 0; k < w->K; ++k)
    if (w->idx[((size_t)r * w->T + t) * w->K + k] == e) return 1;
  return 0;
}

/* BF16 dispatch: every received row of every local expert is a token routed there, each once;
 * the counts are exact; then the expert outputs (rows scaled by 1 + e % 3) for the combine. */
static int check_bf16_dispatch(const world* w, const uint16_t* recv, const int32_t* count, uint16_t* y) {
  int l, row, r, t, h;
  const size_t RT = (size_t)w->R * w->T;
  char* seen = calloc((size_t)w->R * w->T, 1);
  for (l = 0; l < w->L; ++l) {
    const int64_t e = (int64_t)w->rank * w->L + l;
    int want = 0;
    for (r = 0; r < w->R; ++r)
      for (t = 0; t < w->T; ++t) want += token_goes_to(w, r, t, e);
    if (count[l] != want) {
      say("FAILED: recv_count[%d] (expert %lld) = %d, expected %d", l, (long long)e, count[l], want);
      free(seen);
      return 0;
    }
    memset(seen, 0, (size_t)w->R * w->T);
    for (row = 0; row < count[l]; ++row) {
      const uint16_t* got = recv + ((size_t)l * RT + row) * w->H;
      r = (int)from_bf16(got[0]) - 1;
      t = (int)from_bf16(got[1]) - 1;
      if (r < 0 || r >= w->R || t < 0 || t >= w->T || !token_goes_to(w, r, t, e) || seen[r * w->T + t]) {
        say("FAILED: expert %lld row %d names rank %d token %d: not routed there, or twice", (long long)e, row, r, t);
        free(seen);
        return 0;
      }
      seen[r * w->T + t] = 1;
      for (h = 0; h < w->H; ++h) {
        const uint16_t want_v = w->xs[((size_t)r * w->T + t) * w->H + h];
        if (got[h] != want_v) {
          say("FAILED: expert %lld row %d (rank %d token %d) element %d = %g, expected %g", (long long)e, row, r, t, h,
              from_bf16(got[h]), from_bf16(want_v));
          free(seen);
          return 0;
        }
        y[((size_t)l * RT + row) * w->H + h] = to_bf16(from_bf16(got[h]) * expert_scale(e));
      }
    }
  }
  free(seen);
  return 1;
}

/* out[t] = sum_k w[t,k] * bf16(x[t] * (1 + e_k % 3)): every product and partial sum is exact in
 * float32 for these values, so the BF16 result is exact whatever the order of the sum. */
static int check_combine(const world* w, const uint16_t* out) {
  int t, k, h;
  for (t = 0; t < w->T; ++t)
    for (h = 0; h < w->H; ++h) {
      float acc = 0;
      const uint16_t xv = w->xs[((size_t)w->rank * w->T + t) * w->H + h];
      for (k = 0; k < w->K; ++k) {
        const int64_t e = w->idx[((size_t)w->rank * w->T + t) * w->K + k];
        if (e >= 0) acc += weight_of(t, k) * from_bf16(to_bf16(from_bf16(xv) * expert_scale(e)));
      }
      if (out[(size_t)t * w->H + h] != to_bf16(acc)) {
        say("FAILED: combine token %d element %d = %g, expected %g", t, h, from_bf16(out[(size_t)t * w->H + h]),
            from_bf16(to_bf16(acc)));
        return 0;
      }
    }
  return 1;
}

/* Largest |dequantised - token| minus its tolerance over a row (<= 0: within e4m3 rounding). */
static float fp8_excess(const world* w, const uint8_t* q, const float* scales, size_t l, size_t row, int r, int t) {
  const size_t RT = (size_t)w->R * w->T;
  const int G = w->H / 128;
  float worst = -1e30f;
  int h;
  for (h = 0; h < w->H; ++h) {
    /* scales: [L, R*T, G] column-major, storage [L, G, R*T] */
    const float s = scales[(l * G + (size_t)(h / 128)) * RT + row];
    const float got = from_e4m3(q[h]) * s, want = from_bf16(w->xs[((size_t)r * w->T + t) * w->H + h]);
    const float excess = fabsf(got - want) - (0.07f * fabsf(want) + s * 0.002f);
    if (excess > worst) worst = excess;
  }
  return worst;
}

/* FP8 dispatch: each received row is matched to the routed token it is closest to (each token
 * once); every value must be within e4m3 rounding of that token's (1/16 relative, with a margin
 * for float rounding, plus the subnormal step). */
static int check_fp8_dispatch(const world* w, const uint8_t* recv, const float* scales, const int32_t* count) {
  int l, row, r, t;
  const size_t RT = (size_t)w->R * w->T;
  char* used = calloc((size_t)w->R * w->T, 1);
  for (l = 0; l < w->L; ++l) {
    const int64_t e = (int64_t)w->rank * w->L + l;
    memset(used, 0, (size_t)w->R * w->T);
    for (row = 0; row < count[l]; ++row) {
      const uint8_t* q = recv + ((size_t)l * RT + row) * w->H;
      int best_r = -1, best_t = -1;
      float best = 1e30f;
      for (r = 0; r < w->R; ++r)
        for (t = 0; t < w->T; ++t) {
          float x;
          if (used[r * w->T + t] || !token_goes_to(w, r, t, e)) continue;
          x = fp8_excess(w, q, scales, (size_t)l, (size_t)row, r, t);
          if (x < best) best = x, best_r = r, best_t = t;
        }
      if (best_r < 0 || best > 0) {
        say("FAILED: FP8 expert %lld row %d matches no routed token within e4m3 rounding (closest: rank %d token %d, "
            "off by %g beyond the tolerance)",
            (long long)e, row, best_r, best_t, best);
        free(used);
        return 0;
      }
      used[best_r * w->T + best_t] = 1;
    }
  }
  free(used);
  return 1;
}

static void* dev_alloc(const anyep_tensor_t* t, size_t elem) {
  void* p = NULL;
  const size_t bytes = (size_t)numel(t) * elem;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
  cudaMemset(p, 0, bytes);
  return p;
}

/* One LL round on group g: dispatch (staged or not), check, experts, combine, check. */
static int ll_round(const world* w, anyep_group_t g, int device, int staged, cudaStream_t stream) {
  const size_t TK = (size_t)w->T * w->K, TH = (size_t)w->T * w->H, RT = (size_t)w->R * w->T;
  const size_t LRTH = (size_t)w->L * RT * w->H;
  anyep_tensor_t rx, rs, rc, x, idx, wt, out, ex;
  void *d_x = NULL, *d_idx = NULL, *d_w = NULL, *d_rx, *d_rc, *d_out = NULL, *d_y = NULL;
  uint16_t *h_rx = malloc(LRTH * 2), *h_y = calloc(LRTH, 2), *h_out = malloc(TH * 2);
  int32_t* h_rc = malloc((size_t)w->L * 4);
  float* h_w = malloc(TK * 4);
  anyep_handle_t h = NULL;
  const uint32_t flags = staged ? ANYEP_SEND_ONLY : 0;
  int t, k, ok;
  for (t = 0; t < w->T; ++t)
    for (k = 0; k < w->K; ++k) h_w[t * w->K + k] = weight_of(t, k);

  ANYEP_OK(anyep_get_dispatch_outputs(g, &rx, &rs, &rc));
  d_rx = dev_alloc(&rx, 2);
  d_rc = dev_alloc(&rc, 4);
  rx.data = d_rx;
  rc.data = d_rc;
  CUDA_OK(cudaMalloc(&d_x, TH * 2));
  CUDA_OK(cudaMalloc(&d_idx, TK * 8));
  CUDA_OK(cudaMalloc(&d_w, TK * 4));
  CUDA_OK(cudaMalloc(&d_out, TH * 2));
  CUDA_OK(cudaMalloc(&d_y, LRTH * 2));
  CUDA_OK(cudaMemcpy(d_x, w->xs + (size_t)w->rank * TH, TH * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_idx, w->idx + (size_t)w->rank * TK, TK * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_w, h_w, TK * 4, cudaMemcpyHostToDevice));
  x = tensor2(d_x, ANYEP_BFLOAT16, w->T, w->H, device);
  idx = tensor2(d_idx, ANYEP_INT64, w->T, w->K, device);
  wt = tensor2(d_w, ANYEP_FLOAT32, w->T, w->K, device);
  out = tensor2(d_out, ANYEP_BFLOAT16, w->T, w->H, device);

  ANYEP_OK(ll_create(g, &idx, &h));
  ANYEP_OK(ll_dispatch(h, &x, &rx, NULL, &rc, flags, stream));
  if (staged) ANYEP_OK(anyep_complete(h, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(h_rx, d_rx, LRTH * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h_rc, d_rc, (size_t)w->L * 4, cudaMemcpyDeviceToHost));
  ok = check_bf16_dispatch(w, h_rx, h_rc, h_y);
  if (ok) {
    ex = rx;
    ex.data = d_y;
    CUDA_OK(cudaMemcpy(d_y, h_y, LRTH * 2, cudaMemcpyHostToDevice));
    ANYEP_OK(ll_combine(h, &ex, &wt, &out, flags, stream));
    if (staged) ANYEP_OK(anyep_complete(h, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(h_out, d_out, TH * 2, cudaMemcpyDeviceToHost));
    ok = check_combine(w, h_out);
  }
  if (ok)
    say("%s BF16 dispatch: %d experts' rows (%lld values) matched their tokens exactly; combine: %lld values exact",
        staged ? "staged (send-only + complete)" : "fused", w->L, (long long)LRTH, (long long)TH);
  ANYEP_OK(anyep_handle_destroy(h));
  cudaFree(d_x), cudaFree(d_idx), cudaFree(d_w), cudaFree(d_rx), cudaFree(d_rc), cudaFree(d_out), cudaFree(d_y);
  free(h_rx), free(h_y), free(h_out), free(h_rc), free(h_w);
  return ok ? 0 : 1;
}

static int fp8_round(const world* w, anyep_group_t g, int device, cudaStream_t stream) {
  const size_t TK = (size_t)w->T * w->K, TH = (size_t)w->T * w->H;
  anyep_tensor_t rx, rs, rc, x, idx;
  void *d_x = NULL, *d_idx = NULL, *d_rx, *d_rs, *d_rc;
  uint8_t* h_rx;
  float* h_rs;
  int32_t* h_rc = malloc((size_t)w->L * 4);
  anyep_handle_t h = NULL;
  int ok;
  ANYEP_OK(anyep_get_dispatch_outputs(g, &rx, &rs, &rc));
  if (rx.dtype != ANYEP_FLOAT8_E4M3 || rs.dtype != ANYEP_FLOAT32 || rs.ndim != 3) {
    say("FAILED: FP8 group outputs: recv_x dtype %d, recv_scales dtype %d ndim %d", rx.dtype, rs.dtype, rs.ndim);
    return 1;
  }
  d_rx = dev_alloc(&rx, 1);
  d_rs = dev_alloc(&rs, 4);
  d_rc = dev_alloc(&rc, 4);
  rx.data = d_rx, rs.data = d_rs, rc.data = d_rc;
  h_rx = malloc((size_t)numel(&rx));
  h_rs = malloc((size_t)numel(&rs) * 4);
  CUDA_OK(cudaMalloc(&d_x, TH * 2));
  CUDA_OK(cudaMalloc(&d_idx, TK * 8));
  CUDA_OK(cudaMemcpy(d_x, w->xs + (size_t)w->rank * TH, TH * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_idx, w->idx + (size_t)w->rank * TK, TK * 8, cudaMemcpyHostToDevice));
  x = tensor2(d_x, ANYEP_BFLOAT16, w->T, w->H, device);
  idx = tensor2(d_idx, ANYEP_INT64, w->T, w->K, device);
  ANYEP_OK(ll_create(g, &idx, &h));
  ANYEP_OK(ll_dispatch(h, &x, &rx, &rs, &rc, 0, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(h_rx, d_rx, (size_t)numel(&rx), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h_rs, d_rs, (size_t)numel(&rs) * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h_rc, d_rc, (size_t)w->L * 4, cudaMemcpyDeviceToHost));
  ok = check_fp8_dispatch(w, h_rx, h_rs, h_rc);
  if (ok) say("FP8 dispatch: every received value within e4m3 rounding of its token (scales column-major)");
  ANYEP_OK(anyep_handle_destroy(h));
  cudaFree(d_x), cudaFree(d_idx), cudaFree(d_rx), cudaFree(d_rs), cudaFree(d_rc);
  free(h_rx), free(h_rs), free(h_rc);
  return ok ? 0 : 1;
}

/* ---- high-throughput (HT) ------------------------------------------------------------------------ */

#define HT_ALIGN 2 /* expert_alignment of the HT round: the per-expert counts are rounded up to it */

/* The rank token t of rank r goes to in HT: the owner of one of its experts (-1 slots go nowhere). */
static int ht_goes_to(const world* w, int r, int t, int dest) {
  int k;
  for (k = 0; k < w->K; ++k) {
    const int64_t e = w->idx[((size_t)r * w->T + t) * w->K + k];
    if (e >= 0 && e / w->L == dest) return 1;
  }
  return 0;
}

/* The rows an HT dispatch delivers here, as (source rank, source token) in their documented order:
 * by the rank of this node that forwarded them (local index f), then by source node, then by
 * source token: rank node * k + f. On one node (k = R) that is source rank order. Returns the
 * count; src_r and src_t hold R * T entries. */
static int64_t ht_expected_rows(const world* w, int* src_r, int* src_t) {
  int64_t n = 0;
  const int k_node = w->node_ranks, nodes = w->R / w->node_ranks;
  int f, node, t;
  for (f = 0; f < k_node; ++f)
    for (node = 0; node < nodes; ++node)
      for (t = 0; t < w->T; ++t)
        if (ht_goes_to(w, node * k_node + f, t, w->rank)) src_r[n] = node * k_node + f, src_t[n] = t, ++n;
  return n;
}

/* The received top-k of HT row `row` (rank r, token t): this rank's local expert ids (-1 elsewhere)
 * and the weights (0 elsewhere), exact. */
static int check_ht_topk(const world* w, int64_t row, int r, int t, const int64_t* ri, const float* rw) {
  int k;
  for (k = 0; k < w->K; ++k) {
    const int64_t e = w->idx[((size_t)r * w->T + t) * w->K + k];
    const int mine = e >= 0 && e / w->L == w->rank;
    const int64_t want_i = mine ? e - (int64_t)w->rank * w->L : -1;
    const float want_w = mine ? weight_of(t, k) : 0.0f;
    if (ri[row * w->K + k] != want_i || rw[row * w->K + k] != want_w) {
      say("FAILED: HT row %lld (rank %d token %d) top-%d: local expert %lld weight %g, expected %lld and %g",
          (long long)row, r, t, k, (long long)ri[row * w->K + k], rw[row * w->K + k], (long long)want_i, want_w);
      return 0;
    }
  }
  return 1;
}

/* HT dispatch: each routed token exactly once, in the documented order, its values and top-k exact. */
static int check_ht_dispatch(const world* w, int64_t M, const uint16_t* rx, const int64_t* ri, const float* rw) {
  int* src_r = malloc((size_t)w->R * w->T * sizeof(int));
  int* src_t = malloc((size_t)w->R * w->T * sizeof(int));
  const int64_t want = ht_expected_rows(w, src_r, src_t);
  int64_t row;
  int h, ok = 1;
  if (want != M) {
    say("FAILED: HT dispatch received %lld rows, %lld tokens are routed here", (long long)M, (long long)want);
    ok = 0;
  }
  for (row = 0; ok && row < M; ++row) {
    const int r = src_r[row], t = src_t[row];
    for (h = 0; ok && h < w->H; ++h)
      if (rx[row * w->H + h] != w->xs[((size_t)r * w->T + t) * w->H + h]) {
        say("FAILED: HT row %lld (rank %d token %d) element %d = %g, expected %g", (long long)row, r, t, h,
            from_bf16(rx[row * w->H + h]), from_bf16(w->xs[((size_t)r * w->T + t) * w->H + h]));
        ok = 0;
      }
    ok = ok && check_ht_topk(w, row, r, t, ri, rw);
  }
  free(src_r), free(src_t);
  return ok;
}

/* HT combine: out[t] = the sum over the ranks d token t went to of bf16(x[t] * (1 + d)). Each
 * node's partial sum is rounded to BF16 before home adds the nodes' (the internode path sends one
 * BF16 row per node home; on one node that rounding is the final one); every term and sum is
 * exact in float32, so the order does not matter. Weights are summed in float32 alone. */
static int check_ht_combine(const world* w, const uint16_t* out, const float* ow) {
  int t, h, k, d, node;
  const int k_node = w->node_ranks;
  for (t = 0; t < w->T; ++t) {
    for (h = 0; h < w->H; ++h) {
      const float xv = from_bf16(w->xs[((size_t)w->rank * w->T + t) * w->H + h]);
      float acc = 0;
      for (node = 0; node < w->R / k_node; ++node) {
        float part = 0;
        for (d = node * k_node; d < (node + 1) * k_node; ++d)
          if (ht_goes_to(w, w->rank, t, d)) part += from_bf16(to_bf16(xv * (float)(1 + d)));
        acc += from_bf16(to_bf16(part));
      }
      if (out[(size_t)t * w->H + h] != to_bf16(acc)) {
        say("FAILED: HT combine token %d element %d = %g, expected %g", t, h, from_bf16(out[(size_t)t * w->H + h]),
            from_bf16(to_bf16(acc)));
        return 0;
      }
    }
    for (k = 0; k < w->K; ++k) {
      const int64_t e = w->idx[((size_t)w->rank * w->T + t) * w->K + k];
      const float want = e >= 0 ? weight_of(t, k) : 0.0f;
      if (ow[(size_t)t * w->K + k] != want) {
        say("FAILED: HT combined weight token %d top-%d = %g, expected %g", t, k, ow[(size_t)t * w->K + k], want);
        return 0;
      }
    }
  }
  return 1;
}

/* One HT round: handle (layout + counts), counts checked, dispatch checked, experts (rows scaled
 * by 1 + this rank), combine checked. */
static int ht_round(const world* w, anyep_group_t g, int device, cudaStream_t stream) {
  const size_t TK = (size_t)w->T * w->K, TH = (size_t)w->T * w->H;
  anyep_ht_options_t opt;
  anyep_tensor_t x, idx, wt, rx, rs, ri, rw, ex, out, ow;
  anyep_handle_t h = NULL, h2 = NULL;
  void *d_x = NULL, *d_idx = NULL, *d_w = NULL, *d_out = NULL, *d_ow = NULL, *d_rx, *d_ri, *d_rw, *d_y;
  float* h_w = malloc(TK * 4);
  int32_t* per_expert = malloc((size_t)w->L * 4);
  uint16_t *h_rx, *h_y, *h_out = malloc(TH * 2);
  int64_t* h_ri;
  float *h_rw, *h_ow = malloc(TK * 4);
  int64_t M = -1, row, n;
  int t, k, l, r, ok;
  anyep_status_t st;
  for (t = 0; t < w->T; ++t)
    for (k = 0; k < w->K; ++k) h_w[t * w->K + k] = weight_of(t, k);
  CUDA_OK(cudaMalloc(&d_x, TH * 2));
  CUDA_OK(cudaMalloc(&d_idx, TK * 8));
  CUDA_OK(cudaMalloc(&d_w, TK * 4));
  CUDA_OK(cudaMalloc(&d_out, TH * 2));
  CUDA_OK(cudaMalloc(&d_ow, TK * 4));
  CUDA_OK(cudaMemcpy(d_x, w->xs + (size_t)w->rank * TH, TH * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_idx, w->idx + (size_t)w->rank * TK, TK * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_w, h_w, TK * 4, cudaMemcpyHostToDevice));
  x = tensor2(d_x, ANYEP_BFLOAT16, w->T, w->H, device);
  idx = tensor2(d_idx, ANYEP_INT64, w->T, w->K, device);
  wt = tensor2(d_w, ANYEP_FLOAT32, w->T, w->K, device);
  out = tensor2(d_out, ANYEP_BFLOAT16, w->T, w->H, device);
  ow = tensor2(d_ow, ANYEP_FLOAT32, w->T, w->K, device);

  anyep_ht_options_init(&opt);
  opt.num_sms = 8; /* 4 sender and 4 receiver blocks: light on a GPU the ranks share */
  opt.expert_alignment = HT_ALIGN;
  ANYEP_OK(ht_create(g, &idx, &opt, stream, &h));
  /* The handle's dispatch must be the group's next HT call: anything else is refused, locally. */
  st = ht_create(g, &idx, &opt, stream, &h2);
  if (!expect_status("a second HT handle before the first one's dispatch", st, ANYEP_ERR_INVALID_ARGUMENT,
                     "next HT call"))
    return 1;

  ANYEP_OK(anyep_ht_get_recv_counts(h, &M, per_expert, w->L));
  for (l = 0; l < w->L; ++l) {
    const int64_t e = (int64_t)w->rank * w->L + l;
    int want = 0;
    for (r = 0; r < w->R; ++r)
      for (t = 0; t < w->T; ++t) want += token_goes_to(w, r, t, e);
    want = (want + HT_ALIGN - 1) / HT_ALIGN * HT_ALIGN;
    if (per_expert[l] != want) {
      say("FAILED: HT rows for local expert %d = %d, expected %d (aligned to %d)", l, per_expert[l], want, HT_ALIGN);
      return 1;
    }
  }
  ANYEP_OK(anyep_ht_get_dispatch_outputs(h, &rx, &rs, &ri, &rw));
  if (rx.ndim != 2 || rx.shape[0] != M || rx.shape[1] != w->H || rx.dtype != ANYEP_BFLOAT16 || rs.ndim != 0 ||
      ri.shape[0] != M || ri.shape[1] != w->K || rw.dtype != ANYEP_FLOAT32) {
    say("FAILED: HT dispatch outputs: recv_x [%lld, %lld] dtype %d, recv_scales ndim %d, recv_topk_idx [%lld, %lld]",
        (long long)rx.shape[0], (long long)rx.shape[1], rx.dtype, rs.ndim, (long long)ri.shape[0],
        (long long)ri.shape[1]);
    return 1;
  }
  n = M > 0 ? M : 1; /* host copies of at least one row */
  d_rx = dev_alloc(&rx, 2);
  d_ri = dev_alloc(&ri, 8);
  d_rw = dev_alloc(&rw, 4);
  d_y = dev_alloc(&rx, 2);
  rx.data = d_rx, ri.data = d_ri, rw.data = d_rw;
  h_rx = malloc((size_t)n * w->H * 2);
  h_y = malloc((size_t)n * w->H * 2);
  h_ri = malloc((size_t)n * w->K * 8);
  h_rw = malloc((size_t)n * w->K * 4);
  ANYEP_OK(ht_dispatch(h, &x, NULL, &wt, &rx, NULL, &ri, &rw, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  if (M > 0) { /* no rows, no buffers (cudaMalloc of 0 bytes gives none) */
    CUDA_OK(cudaMemcpy(h_rx, d_rx, (size_t)M * w->H * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_ri, d_ri, (size_t)M * w->K * 8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_rw, d_rw, (size_t)M * w->K * 4, cudaMemcpyDeviceToHost));
  }
  ok = check_ht_dispatch(w, M, h_rx, h_ri, h_rw);
  if (ok) {
    /* This rank's "experts": every received row times 1 + rank. */
    for (row = 0; row < M * w->H; ++row) h_y[row] = to_bf16(from_bf16(h_rx[row]) * (float)(1 + w->rank));
    if (M > 0) CUDA_OK(cudaMemcpy(d_y, h_y, (size_t)M * w->H * 2, cudaMemcpyHostToDevice));
    ex = rx;
    ex.data = d_y;
    ANYEP_OK(ht_combine(h, &ex, &rw, &out, &ow, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(h_out, d_out, TH * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_ow, d_ow, TK * 4, cudaMemcpyDeviceToHost));
    ok = check_ht_combine(w, h_out, h_ow);
  }
  if (ok)
    say("HT dispatch: %lld rows received in the documented order, values, local expert ids and weights exact, "
        "per-expert "
        "counts aligned to %d; combine: %lld values and %lld weights exact",
        (long long)M, HT_ALIGN, (long long)TH, (long long)TK);
  ANYEP_OK(anyep_handle_destroy(h));
  cudaFree(d_x), cudaFree(d_idx), cudaFree(d_w), cudaFree(d_out), cudaFree(d_ow);
  cudaFree(d_rx), cudaFree(d_ri), cudaFree(d_rw), cudaFree(d_y);
  free(h_w), free(per_expert), free(h_rx), free(h_y), free(h_out), free(h_ri), free(h_rw), free(h_ow);
  return ok ? 0 : 1;
}

/* The FP8 HT round's inputs (dispatch moves them, no arithmetic): byte h of token t of rank r (never
 * an e4m3 NaN, 0x7f or 0xff), and its scale g. */
static uint8_t ht_fp8_byte(int r, int t, int h) { return (uint8_t)((r * 37 + t * 11 + h * 5) % 126); }
static float ht_fp8_scale(int r, int t, int g) { return (float)(r * 1000 + t * 10 + g + 1) * 0.5f; }

/* An FP8 HT round: x float8 e4m3 [T, H] with float32 scales [T, H/128] column-major (strides
 * {1, T}); every received byte, scale, local expert id and weight exact, in the documented order. */
static int ht_fp8_round(const world* w, anyep_group_t g, int device, cudaStream_t stream) {
  const int G = w->H / 128;
  const size_t TK = (size_t)w->T * w->K;
  anyep_ht_options_t opt;
  anyep_tensor_t x, xs, idx, wt, rx, rs, ri, rw;
  anyep_handle_t h = NULL;
  uint8_t *h_x = malloc((size_t)w->T * w->H), *h_rx;
  float *h_s = malloc((size_t)w->T * G * 4), *h_w = malloc(TK * 4), *h_rs, *h_rw;
  int64_t* h_ri;
  int* src_r = malloc((size_t)w->R * w->T * sizeof(int));
  int* src_t = malloc((size_t)w->R * w->T * sizeof(int));
  void *d_x = NULL, *d_s = NULL, *d_idx = NULL, *d_w = NULL, *d_rx, *d_rs, *d_ri, *d_rw;
  int64_t M = -1, n, row, want;
  int t, k, c, ok = 1;
  for (t = 0; t < w->T; ++t) {
    for (c = 0; c < w->H; ++c) h_x[(size_t)t * w->H + c] = ht_fp8_byte(w->rank, t, c);
    for (c = 0; c < G; ++c) h_s[(size_t)c * w->T + t] = ht_fp8_scale(w->rank, t, c);
    for (k = 0; k < w->K; ++k) h_w[t * w->K + k] = weight_of(t, k);
  }
  CUDA_OK(cudaMalloc(&d_x, (size_t)w->T * w->H));
  CUDA_OK(cudaMalloc(&d_s, (size_t)w->T * G * 4));
  CUDA_OK(cudaMalloc(&d_idx, TK * 8));
  CUDA_OK(cudaMalloc(&d_w, TK * 4));
  CUDA_OK(cudaMemcpy(d_x, h_x, (size_t)w->T * w->H, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_s, h_s, (size_t)w->T * G * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_idx, w->idx + (size_t)w->rank * TK, TK * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_w, h_w, TK * 4, cudaMemcpyHostToDevice));
  x = tensor2(d_x, ANYEP_FLOAT8_E4M3, w->T, w->H, device);
  xs = tensor2(d_s, ANYEP_FLOAT32, w->T, G, device);
  xs.strides[0] = 1, xs.strides[1] = w->T; /* column-major, as DeepEP's FP8 scales often are */
  idx = tensor2(d_idx, ANYEP_INT64, w->T, w->K, device);
  wt = tensor2(d_w, ANYEP_FLOAT32, w->T, w->K, device);
  anyep_ht_options_init(&opt);
  opt.num_sms = 8;
  opt.expert_alignment = HT_ALIGN;
  ANYEP_OK(ht_create(g, &idx, &opt, stream, &h));
  ANYEP_OK(anyep_ht_get_recv_counts(h, &M, NULL, 0));
  ANYEP_OK(anyep_ht_get_dispatch_outputs(h, &rx, &rs, &ri, &rw));
  if (rs.ndim != 2 || rs.shape[0] != M || rs.shape[1] != G || rs.dtype != ANYEP_FLOAT32) {
    say("FAILED: FP8 HT recv_scales: ndim %d [%lld, %lld] dtype %d, expected [%lld, %d] float32", rs.ndim,
        (long long)rs.shape[0], (long long)rs.shape[1], rs.dtype, (long long)M, G);
    return 1;
  }
  n = M > 0 ? M : 1;
  d_rx = dev_alloc(&rx, 1), d_rs = dev_alloc(&rs, 4), d_ri = dev_alloc(&ri, 8), d_rw = dev_alloc(&rw, 4);
  rx.data = d_rx, rs.data = d_rs, ri.data = d_ri, rw.data = d_rw;
  h_rx = malloc((size_t)n * w->H), h_rs = malloc((size_t)n * G * 4);
  h_ri = malloc((size_t)n * w->K * 8), h_rw = malloc((size_t)n * w->K * 4);
  ANYEP_OK(ht_dispatch(h, &x, &xs, &wt, &rx, &rs, &ri, &rw, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  if (M > 0) {
    CUDA_OK(cudaMemcpy(h_rx, d_rx, (size_t)M * w->H, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_rs, d_rs, (size_t)M * G * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_ri, d_ri, (size_t)M * w->K * 8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_rw, d_rw, (size_t)M * w->K * 4, cudaMemcpyDeviceToHost));
  }
  want = ht_expected_rows(w, src_r, src_t);
  if (want != M) {
    say("FAILED: FP8 HT dispatch received %lld rows, %lld tokens are routed here", (long long)M, (long long)want);
    ok = 0;
  }
  for (row = 0; ok && row < M; ++row) {
    const int r = src_r[row];
    t = src_t[row];
    for (c = 0; ok && c < w->H; ++c)
      if (h_rx[row * w->H + c] != ht_fp8_byte(r, t, c)) {
        say("FAILED: FP8 HT row %lld (rank %d token %d) byte %d = %d, expected %d", (long long)row, r, t, c,
            h_rx[row * w->H + c], ht_fp8_byte(r, t, c));
        ok = 0;
      }
    for (c = 0; ok && c < G; ++c)
      if (h_rs[row * G + c] != ht_fp8_scale(r, t, c)) {
        say("FAILED: FP8 HT row %lld (rank %d token %d) scale %d = %g, expected %g", (long long)row, r, t, c,
            h_rs[row * G + c], ht_fp8_scale(r, t, c));
        ok = 0;
      }
    ok = ok && check_ht_topk(w, row, r, t, h_ri, h_rw);
  }
  if (ok)
    say("FP8 HT dispatch: %lld rows in the documented order, bytes, scales (column-major in) and top-k exact",
        (long long)M);
  ANYEP_OK(anyep_handle_destroy(h));
  cudaFree(d_x), cudaFree(d_s), cudaFree(d_idx), cudaFree(d_w), cudaFree(d_rx), cudaFree(d_rs), cudaFree(d_ri),
      cudaFree(d_rw);
  free(h_x), free(h_s), free(h_w), free(h_rx), free(h_rs), free(h_ri), free(h_rw), free(src_r), free(src_t);
  return ok ? 0 : 1;
}

static int make_group(const options* o, int rank, uint16_t port, int listen_fd, anyep_mode_t mode, anyep_dtype_t dtype,
                      int device, anyep_group_t* g) {
  anyep_config_t cfg;
  anyep_config_init(&cfg);
  cfg.mode = mode;
  cfg.rank = rank;
  cfg.num_ranks = o->ranks;
  cfg.device = device;
  cfg.num_experts = (int64_t)o->local * o->ranks;
  cfg.max_tokens_per_rank = o->tokens;
  cfg.hidden = o->hidden;
  cfg.dispatch_dtype = dtype;
  cfg.timeout_s = o->timeout;
  tcp_bootstrap(&cfg, rank, port, listen_fd);
  ANYEP_OK(anyep_group_create(&cfg, g));
  return 0;
}

/* Builds every rank's inputs (each rank recomputes all of them: no exchange needed). */
static void make_world(const options* o, int rank, world* w) {
  int r, t, h;
  w->R = o->ranks, w->T = o->tokens, w->H = o->hidden, w->L = o->local, w->K = o->topk;
  w->E = w->L * w->R, w->rank = rank;
  w->node_ranks = getenv("ANYEP_HT_RANKS_PER_NODE") ? atoi(getenv("ANYEP_HT_RANKS_PER_NODE")) : 0;
  if (w->node_ranks <= 0 || w->R % w->node_ranks != 0) w->node_ranks = w->R;
  w->idx = malloc((size_t)w->R * w->T * w->K * 8);
  w->xs = malloc((size_t)w->R * w->T * w->H * 2);
  for (r = 0; r < w->R; ++r)
    for (t = 0; t < w->T; ++t) {
      topk_of(r, t, w->K, w->E, w->idx + ((size_t)r * w->T + t) * w->K);
      for (h = 0; h < w->H; ++h) w->xs[((size_t)r * w->T + t) * w->H + h] = to_bf16(x_value(r, t, h));
    }
}

/* The device of this rank, or EXIT_SKIP when there is none. */
static int pick_device(int rank, int* device) {
  int32_t n = 0;
  anyep_status_t s = anyep_get_device_count(&n);
  if (s != ANYEP_SUCCESS || n == 0) {
    say("no GPU: the data path needs one (%s)", s == ANYEP_SUCCESS ? "no CUDA device visible" : anyep_get_last_error());
    return EXIT_SKIP;
  }
  *device = rank % n;
  return 0;
}

/* What a rank of the GPU part starts with: its device (EXIT_SKIP when there is none), a stream,
 * every rank's inputs, and a group of the given mode and dispatch dtype. */
static int start_rank(const options* o, int rank, uint16_t port, int listen_fd, anyep_mode_t mode, anyep_dtype_t dtype,
                      world* w, anyep_group_t* g, int* device, cudaStream_t* stream) {
  int rc;
  if ((rc = pick_device(rank, device)) != 0) return rc;
  CUDA_OK(cudaSetDevice(*device));
  CUDA_OK(cudaStreamCreate(stream));
  make_world(o, rank, w);
  return make_group(o, rank, port, listen_fd, mode, dtype, *device, g);
}

static int gpu_rank_bf16(const options* o, int rank, uint16_t port, int listen_fd) {
  world w;
  anyep_group_t g = NULL;
  anyep_status_t async = ANYEP_SUCCESS;
  cudaStream_t stream;
  int device = 0, rc;
  if ((rc = start_rank(o, rank, port, listen_fd, ANYEP_MODE_LL, ANYEP_BFLOAT16, &w, &g, &device, &stream)) != 0)
    return rc;
  say("BF16 group of %d ranks on GPU %d: %d experts, %d tokens per rank, hidden %d, top-%d", o->ranks, device, w.E, w.T,
      w.H, w.K);
  rc = ll_round(&w, g, device, 0, stream);
  if (rc == 0) rc = ll_round(&w, g, device, 1, stream);
  ANYEP_OK(anyep_group_get_async_error(g, &async));
  if (async != ANYEP_SUCCESS) {
    say("FAILED: asynchronous error: %s", anyep_get_last_error());
    rc = 1;
  }
  ANYEP_OK(anyep_group_destroy(g));
  return rc;
}

/* A rank's group of `mode` and `dtype`, `passes` rounds of `round` on it, no asynchronous error. */
typedef int (*round_fn)(const world* w, anyep_group_t g, int device, cudaStream_t stream);
static int rank_rounds(const options* o, int rank, uint16_t port, int listen_fd, anyep_mode_t mode, anyep_dtype_t dtype,
                       round_fn round, int passes) {
  world w;
  anyep_group_t g = NULL;
  anyep_status_t async = ANYEP_SUCCESS;
  cudaStream_t stream;
  int device = 0, rc, i;
  if ((rc = start_rank(o, rank, port, listen_fd, mode, dtype, &w, &g, &device, &stream)) != 0) return rc;
  for (i = 0; i < passes && rc == 0; ++i) rc = round(&w, g, device, stream);
  ANYEP_OK(anyep_group_get_async_error(g, &async));
  if (async != ANYEP_SUCCESS) {
    say("FAILED: asynchronous error: %s", anyep_get_last_error());
    rc = 1;
  }
  ANYEP_OK(anyep_group_destroy(g));
  return rc;
}

static int gpu_rank_fp8(const options* o, int rank, uint16_t port, int listen_fd) {
  return rank_rounds(o, rank, port, listen_fd, ANYEP_MODE_LL, ANYEP_FLOAT8_E4M3, fp8_round, 1);
}

/* Two HT passes over the same buffers. */
static int gpu_rank_ht(const options* o, int rank, uint16_t port, int listen_fd) {
  return rank_rounds(o, rank, port, listen_fd, ANYEP_MODE_HT, ANYEP_BFLOAT16, ht_round, 2);
}

static int gpu_rank_ht_fp8(const options* o, int rank, uint16_t port, int listen_fd) {
  return rank_rounds(o, rank, port, listen_fd, ANYEP_MODE_HT, ANYEP_FLOAT8_E4M3, ht_fp8_round, 1);
}

static int gpu_part(const options* o) {
  int rc = 0;
  if (strcmp(o->part, "ht") != 0) {
    rc = run_ranks(o, "BF16 dispatch/combine", gpu_rank_bf16);
    if (rc == 0) rc = run_ranks(o, "FP8 dispatch", gpu_rank_fp8);
  }
  if (rc == 0) rc = run_ranks(o, "HT dispatch/combine", gpu_rank_ht);
  if (rc == 0) rc = run_ranks(o, "FP8 HT dispatch", gpu_rank_ht_fp8);
  return rc;
}

#else /* no CUDA runtime in this build of the program */

static int gpu_part(const options* o) {
  (void)o;
  say("no GPU: this program was built without the CUDA runtime (define ANYEP_ROUNDTRIP_CUDA and link cudart)");
  return EXIT_SKIP;
}

#endif

/* ---- main ---------------------------------------------------------------------------------------- */

static const char* kUsage =
    "usage: capi_roundtrip [--part cpu|gpu|all] [--ranks N] [--tokens T] [--hidden H] [--local-experts L]\n"
    "                  [--topk K] [--timeout-s S]\n"
    "  --part          cpu: refusals and GPU-free groups; gpu: LL and HT dispatch/combine checked; ht: the HT\n"
    "                  rounds alone; all: cpu and gpu [all]\n"
    "  --ranks         processes, 1..16 (they share this machine's GPUs; HT reaches 16) [2]\n"
    "  --tokens        tokens per rank, 1..64 [32]\n"
    "  --hidden        a multiple of 128, 128..4096 [512]\n"
    "  --local-experts experts per rank, 1..32 [4]\n"
    "  --topk          experts per token, 1..16 and at most ranks x local experts [4]\n"
    "  --timeout-s     seconds each part may take, 1..3600 [120]\n"
    "exit status: 0 passed, 1 a check failed, 2 bad command line, 77 no GPU for the GPU part\n";

int main(int argc, char** argv) {
  options o = {2, 32, 512, 4, 4, 120.0, "all"};
  int i, timeout = 120, rc = 0;
  char secret[33];
  for (i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (v == NULL) {
      fprintf(stderr, "capi_roundtrip: %s needs a value\n%s", a, kUsage);
      return 2;
    }
    ++i;
    if (strcmp(a, "--part") == 0) {
      ok = strcmp(v, "cpu") == 0 || strcmp(v, "gpu") == 0 || strcmp(v, "ht") == 0 || strcmp(v, "all") == 0;
      if (!ok) fprintf(stderr, "capi_roundtrip: --part='%s' is not cpu, gpu, ht or all\n", v);
      o.part = v;
    } else if (strcmp(a, "--ranks") == 0) {
      ok = parse_int(a, v, 1, 16, &o.ranks);
    } else if (strcmp(a, "--tokens") == 0) {
      ok = parse_int(a, v, 1, 64, &o.tokens);
    } else if (strcmp(a, "--hidden") == 0) {
      ok = parse_int(a, v, 128, 4096, &o.hidden);
      if (ok && o.hidden % 128 != 0) ok = 0, fprintf(stderr, "capi_roundtrip: --hidden must be a multiple of 128\n");
    } else if (strcmp(a, "--local-experts") == 0) {
      ok = parse_int(a, v, 1, 32, &o.local);
    } else if (strcmp(a, "--topk") == 0) {
      ok = parse_int(a, v, 1, 16, &o.topk);
    } else if (strcmp(a, "--timeout-s") == 0) {
      ok = parse_int(a, v, 1, 3600, &timeout);
      o.timeout = timeout;
    } else {
      fprintf(stderr, "capi_roundtrip: unknown option %s\n", a);
      ok = 0;
    }
    if (!ok) {
      fputs(kUsage, stderr);
      return 2;
    }
  }
  if (o.topk > o.ranks * o.local) {
    fprintf(stderr, "capi_roundtrip: --topk %d is more than the %d experts\n", o.topk, o.ranks * o.local);
    return 2;
  }
  /* A per-run secret for the TCP store's hellos, unless the caller set one. */
  if (getenv("ANYEP_BOOTSTRAP_SECRET") == NULL) {
    FILE* f = fopen("/dev/urandom", "rb");
    unsigned char b[16];
    if (f == NULL || fread(b, 1, sizeof b, f) != sizeof b) {
      fprintf(stderr, "capi_roundtrip: cannot read /dev/urandom for the bootstrap secret\n");
      return 1;
    }
    fclose(f);
    for (i = 0; i < 16; ++i) snprintf(secret + 2 * i, 3, "%02x", b[i]);
    setenv("ANYEP_BOOTSTRAP_SECRET", secret, 1);
  }
  say("anyep %s (header %s), %d ranks, %d tokens per rank, hidden %d, %d experts per rank, top-%d", anyep_version(),
      ANYEP_VERSION_STRING, o.ranks, o.tokens, o.hidden, o.local, o.topk);
  if (strcmp(anyep_version(), ANYEP_VERSION_STRING) != 0) say("note: the library and the header differ in version");

  if (strcmp(o.part, "cpu") == 0 || strcmp(o.part, "all") == 0) {
    say("CPU part: refusals, then GPU-free groups across %d processes", o.ranks);
    if (!refusals(&o)) return 1;
    if (run_ranks(&o, "GPU-free groups", gpu_free_rank) != 0) return 1;
    say("CPU part passed");
  }
  if (strcmp(o.part, "cpu") != 0) {
    say("GPU part: LL, then HT dispatch/combine across %d processes", o.ranks);
    rc = gpu_part(&o);
    if (rc == EXIT_SKIP)
      say("GPU part skipped: no GPU");
    else if (rc == 0)
      say("GPU part passed");
    else
      say("GPU part FAILED");
  }
  return rc;
}
