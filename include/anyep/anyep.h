/* anyep/include/anyep/anyep.h — the C API: expert-parallel dispatch and combine for C and C++
 * runtimes (C99; no CUDA header needed to include it).
 *
 *   anyep_config_t cfg;
 *   anyep_config_init(&cfg);                       sizes the struct, sets the defaults
 *   cfg.rank = r; cfg.num_ranks = R; cfg.num_experts = E;
 *   cfg.max_tokens_per_rank = T; cfg.hidden = H;
 *   cfg.bootstrap.tcp_host = "10.0.0.1"; cfg.bootstrap.tcp_port = 29500;
 *   anyep_group_t g;   anyep_group_create(&cfg, &g);         collective
 *   anyep_handle_t h;  anyep_handle_create(g, ANYEP_MODE_LL, &topk_idx, NULL, stream, &h);
 *   anyep_dispatch_args_t d;  anyep_dispatch_args_init(&d, ANYEP_MODE_LL);
 *   d.x = &x; d.recv_x = &recv_x; d.recv_count = &recv_count; d.stream = stream;
 *   anyep_dispatch(h, &d);
 *   ... experts ...
 *   anyep_combine_args_t c;   anyep_combine_args_init(&c, ANYEP_MODE_LL);
 *   c.x = &expert_out; c.topk_weights = &topk_weights; c.out = &out; c.stream = stream;
 *   anyep_combine(h, &c);
 *   anyep_handle_destroy(h);  anyep_group_destroy(g);        destroy is collective
 *
 * High-throughput (cfg.mode = ANYEP_MODE_HT or ANYEP_MODE_BOTH): the same calls with ANYEP_MODE_HT
 * handles and args; the handle's creation exchanges the counts, so the outputs are sized after it:
 *   anyep_handle_create(g, ANYEP_MODE_HT, &topk_idx, NULL, stream, &h);   layout + counts exchange
 *   anyep_ht_get_dispatch_outputs(h, &recv_x, NULL, &recv_topk_idx, &recv_topk_weights);
 *
 * Every function returns an anyep_status_t; on failure anyep_get_last_error() gives a message that
 * names the argument or what was missing. No C++ exception leaves this API. Calls on one group
 * from several threads at once are not supported (as for a CUDA stream's user); different groups
 * are independent.
 *
 * Modes: low-latency (LL: decode-sized batches into fixed-size receive buffers) and high-throughput
 * (HT, DeepEP's "normal" mode, inside a node and across nodes). A handle has one mode;
 * anyep_dispatch and anyep_combine route by it. A group serves the modes its cfg.mode names; a
 * handle of another mode is refused with ANYEP_ERR_INVALID_ARGUMENT naming cfg->mode.
 *
 * A GPU-free group (cfg.device = ANYEP_DEVICE_NONE) bootstraps and checks every call's arguments
 * like a real one but has no buffer: its data-path calls return ANYEP_ERR_UNSUPPORTED. For tests and
 * dry runs on machines without a GPU.
 */
#ifndef ANYEP_ANYEP_H
#define ANYEP_ANYEP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "anyep/status.h"
#include "anyep/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version --------------------------------------------------------------------------------- */

/* The library's version, "MAJOR.MINOR.PATCH" (ANYEP_VERSION_STRING of the headers it was built with). */
const char* anyep_version(void);

/* ---- errors ---------------------------------------------------------------------------------- */

/* The message of the last call on this thread that did not return ANYEP_SUCCESS ("" if none). The
 * pointer stays valid until this thread's next failing call. */
const char* anyep_get_last_error(void);

/* ---- tensors --------------------------------------------------------------------------------- */

typedef enum anyep_dtype {
  ANYEP_DTYPE_INVALID = 0,
  ANYEP_BOOL = 1,
  ANYEP_UINT8 = 2,
  ANYEP_INT8 = 3,
  ANYEP_INT16 = 4,
  ANYEP_INT32 = 5,
  ANYEP_INT64 = 6,
  ANYEP_FLOAT16 = 7,
  ANYEP_BFLOAT16 = 8,
  ANYEP_FLOAT32 = 9,
  ANYEP_FLOAT64 = 10,
  ANYEP_FLOAT8_E4M3 = 11, /* e4m3fn: no infinities */
  ANYEP_FLOAT8_E5M2 = 12
} anyep_dtype_t;

#define ANYEP_MAX_DIMS 8

/* A tensor argument: device memory, row-major unless strides say otherwise. */
typedef struct anyep_tensor {
  void* data;                      /* first element */
  anyep_dtype_t dtype;             /* element type */
  int32_t ndim;                    /* 0..ANYEP_MAX_DIMS */
  int64_t shape[ANYEP_MAX_DIMS];   /* sizes of the first ndim dimensions */
  int64_t strides[ANYEP_MAX_DIMS]; /* in elements; all zero: row-major contiguous */
  int32_t device;                  /* CUDA device ordinal of the memory */
} anyep_tensor_t;

/* ---- configuration --------------------------------------------------------------------------- */

typedef enum anyep_mode {
  ANYEP_MODE_LL = 1,  /* low-latency: decode-sized batches, fixed-size receive buffers */
  ANYEP_MODE_HT = 2,  /* high-throughput (<= 16 ranks per node by direct stores; nodes through the proxy) */
  ANYEP_MODE_BOTH = 3 /* one group serving both, each mode in its own buffer */
} anyep_mode_t;

#define ANYEP_DEVICE_CURRENT (-1) /* the calling thread's current CUDA device */
#define ANYEP_DEVICE_NONE (-2)    /* GPU-free group: bootstrap and argument checks only */

/* Config flags. */
#define ANYEP_CONFIG_ROUND_SCALE 0x1u /* FP8 dispatch: scales rounded up to powers of two */
#define ANYEP_CONFIG_UE8M0 0x2u       /* FP8 dispatch: scales as packed UE8M0 exponents (needs ROUND_SCALE) */

/* Device memory for the handles' bookkeeping (one allocation of a few KiB to MiB per handle).
 * Both callbacks or neither (then cudaMalloc / cudaFree). alloc returns NULL on failure. */
typedef struct anyep_allocator {
  void* (*alloc)(size_t bytes, int32_t device, void* user);
  void (*free)(void* ptr, size_t bytes, int32_t device, void* user);
  void* user;
} anyep_allocator_t;

/* Out-of-band allgather (MPI_Allgather, ncclAllGather, torch.distributed, ...): every rank
 * contributes `bytes` bytes at `send`; `recv` receives num_ranks * bytes, rank r's at r * bytes.
 * Called collectively, the same number of times on every rank. Returns 0 on success. */
typedef int (*anyep_allgather_fn)(const void* send, void* recv, size_t bytes, void* user);

typedef enum anyep_bootstrap_kind {
  ANYEP_BOOTSTRAP_TCP = 1,      /* built-in TCP store: rank 0 serves tcp_host:tcp_port */
  ANYEP_BOOTSTRAP_ALLGATHER = 2 /* the caller's allgather callback */
} anyep_bootstrap_kind_t;

typedef struct anyep_bootstrap {
  anyep_bootstrap_kind_t kind;
  /* TCP store. Every hello carries the secret in ANYEP_BOOTSTRAP_SECRET (docs/environment.md). */
  const char* tcp_host;  /* rank 0's address ("127.0.0.1", a host name) */
  uint16_t tcp_port;     /* 1..65535 (rank 0 listens there), or 0 with tcp_listen_fd on rank 0 */
  int32_t tcp_listen_fd; /* rank 0: an already bound, listening socket it takes over; -1: bind */
  /* Allgather callback. */
  anyep_allgather_fn allgather;
  void* allgather_user;
} anyep_bootstrap_t;

/* Versioned by its first field: set struct_size = sizeof(anyep_config_t) (anyep_config_init
 * does). A library newer than the header accepts the older, smaller struct; an older library
 * accepts a newer struct only when the fields it does not know are zero. */
typedef struct anyep_config {
  size_t struct_size;
  anyep_mode_t mode;            /* ANYEP_MODE_LL (default) */
  int32_t rank;                 /* this process's rank in [0, num_ranks) */
  int32_t num_ranks;            /* >= 1 */
  int32_t device;               /* CUDA ordinal, ANYEP_DEVICE_CURRENT (default) or ANYEP_DEVICE_NONE */
  int64_t num_experts;          /* a multiple of num_ranks */
  int64_t max_tokens_per_rank;  /* T: most tokens one rank dispatches in one call */
  int64_t hidden;               /* H: elements per token, a multiple of 128 */
  anyep_dtype_t dispatch_dtype; /* what dispatch delivers: ANYEP_BFLOAT16 (default) or ANYEP_FLOAT8_E4M3 */
  anyep_dtype_t combine_dtype;  /* what combine takes and returns: ANYEP_BFLOAT16 */
  uint32_t flags;               /* ANYEP_CONFIG_* */
  int64_t ll_buffer_bytes;      /* LL buffer per rank; 0: the size the shape needs */
  int64_t ht_buffer_bytes;      /* HT buffer per rank; 0: what the default anyep_ht_options_t needs */
  double timeout_s;             /* group creation's waits (bootstrap, connection); 0: ANYEP_TIMEOUT_S.
                                   Waits of the data path use ANYEP_TIMEOUT_S. */
  const char* ll_path;          /* NULL or "": ANYEP_LL_PATH; else "auto", "proxy-cuda-ipc", "proxy-libfabric" */
  anyep_allocator_t allocator;  /* all NULL: cudaMalloc / cudaFree */
  anyep_bootstrap_t bootstrap;
} anyep_config_t;

/* Zeroes *cfg, sets struct_size from this header and the defaults (LL, current device, BF16,
 * TCP bootstrap on 127.0.0.1 without a listening socket). */
static inline void anyep_config_init(anyep_config_t* cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->struct_size = sizeof(*cfg);
  cfg->mode = ANYEP_MODE_LL;
  cfg->num_ranks = 1;
  cfg->device = ANYEP_DEVICE_CURRENT;
  cfg->dispatch_dtype = ANYEP_BFLOAT16;
  cfg->combine_dtype = ANYEP_BFLOAT16;
  cfg->bootstrap.kind = ANYEP_BOOTSTRAP_TCP;
  cfg->bootstrap.tcp_host = "127.0.0.1";
  cfg->bootstrap.tcp_listen_fd = -1;
}

/* ---- group ----------------------------------------------------------------------------------- */

typedef struct anyep_group* anyep_group_t;   /* opaque */
typedef struct anyep_handle* anyep_handle_t; /* opaque */
typedef void* anyep_stream_t;                /* a cudaStream_t; NULL: the default stream */

/* Collective over cfg's bootstrap: every rank calls it with the same shape, modes and dtypes (a
 * rank whose configuration differs is named in the error), the LL buffers are allocated and
 * connected (direct stores where peers are reachable, the CPU proxy for the others), and the HT
 * buffers: over the node's ranks by direct stores (else ANYEP_ERR_UNSUPPORTED naming the rank), and,
 * when the ranks span nodes (hosts, or ANYEP_HT_RANKS_PER_NODE), the rail exchange between nodes
 * through the CPU proxy (ANYEP_HT_NET_PATH), its region sized for every token to every node. */
anyep_status_t anyep_group_create(const anyep_config_t* cfg, anyep_group_t* group);

/* Collective: waits (at most the creation timeout) for every rank to arrive, so no peer still
 * writes into this rank's buffer, then frees everything. The group is gone even when the wait
 * failed (then the status says which rank was missing). Destroying twice is ANYEP_ERR_INVALID_ARGUMENT. */
anyep_status_t anyep_group_destroy(anyep_group_t group);

/* Non-blocking: an error the group's kernels or proxy threads raised since creation (a peer that
 * timed out, a rejected command). *async_error is ANYEP_SUCCESS when none; otherwise the error's
 * status, and anyep_get_last_error() on this thread gives its message. The group is unusable after
 * an asynchronous error: destroy it. */
anyep_status_t anyep_group_get_async_error(anyep_group_t group, anyep_status_t* async_error);

/* The outputs an LL dispatch needs (data NULL, device the group's; 0 in a GPU-free group): recv_x [L, R*T, H] of the
 * dispatch dtype, recv_scales (FP8 only: [L, R*T, H/128] float32, or [L, R*T, H/512] int32 with UE8M0, column-major:
 * strides {R*T*G, 1, R*T}; ndim 0 without FP8), recv_count [L] int32. Any pointer may be NULL. */
anyep_status_t anyep_get_dispatch_outputs(anyep_group_t group, anyep_tensor_t* recv_x, anyep_tensor_t* recv_scales,
                                          anyep_tensor_t* recv_count);

/* CUDA devices this process can use (0 when there is none, or the library was built without CUDA). */
anyep_status_t anyep_get_device_count(int32_t* count);

/* ---- per forward pass ------------------------------------------------------------------------ */

/* Tuning of one HT handle (DeepEP's Config). Versioned like anyep_config_t: struct_size first
 * (anyep_ht_options_init sets it). Every 0 is a default. */
typedef struct anyep_ht_options {
  size_t struct_size;
  int32_t num_sms;             /* SMs of the HT kernels: even, <= the device's; 0: 20 */
  int32_t dispatch_chunk_send; /* tokens a sender publishes at once; 0: DeepEP's table for num_ranks */
  int32_t dispatch_chunk_recv; /* receive ring, tokens; 0: the table */
  int32_t combine_chunk_send;  /* 0: the table */
  int32_t combine_chunk_recv;  /* 0: the table */
  int32_t expert_alignment;    /* per-expert received counts rounded up to a multiple; 0 or 1: none */
} anyep_ht_options_t;

static inline void anyep_ht_options_init(anyep_ht_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
}

/* A handle for one forward pass of one layer in `mode` (ANYEP_MODE_LL or ANYEP_MODE_HT; the group
 * must serve it). topk_idx (int64 [N, K] on the group's device, N <= max_tokens_per_rank, K <= 16,
 * -1 = no expert) is the routing; its memory must stay valid and unchanged until the handle's
 * combine has run. The handle owns the routing bookkeeping dispatch writes and combine reads (from
 * the group's allocator); anyep_dispatch and anyep_combine take the handle's mode from it.
 *
 * LL: nothing runs on the device; ht_options must be NULL and stream is not used.
 * HT: collective (every rank, in the same order as its other HT calls). topk_idx is laid out and
 * the counts are exchanged on `stream`; the host then waits (at most ANYEP_TIMEOUT_S) for the
 * number of rows this rank receives, so that the caller can size the outputs
 * (anyep_ht_get_recv_counts, anyep_ht_get_dispatch_outputs). Across nodes the top-k ids cross the
 * rail exchange first and the host waits twice (the rows it forwards, then the node's counts).
 * ht_options NULL: the defaults; they hold for the handle's dispatch and combine. Its dispatch must
 * be the group's next HT call on every rank: any other HT call of the group before it is refused
 * with ANYEP_ERR_INVALID_ARGUMENT. In a GPU-free group every argument is checked, and an HT handle
 * knows no counts (anyep_ht_get_* return ANYEP_ERR_UNSUPPORTED "no GPU"). */
anyep_status_t anyep_handle_create(anyep_group_t group, anyep_mode_t mode, const anyep_tensor_t* topk_idx,
                                   const anyep_ht_options_t* ht_options, anyep_stream_t stream, anyep_handle_t* handle);
/* Frees the handle's memory at once: the work that uses it must be finished (or the allocator
 * stream-aware). Destroying twice is ANYEP_ERR_INVALID_ARGUMENT. */
anyep_status_t anyep_handle_destroy(anyep_handle_t handle);
/* The mode the handle was created for (ANYEP_MODE_LL or ANYEP_MODE_HT). */
anyep_status_t anyep_handle_get_mode(anyep_handle_t handle, anyep_mode_t* mode);

#define ANYEP_SEND_ONLY 0x1u /* LL: launch only the send phase; anyep_complete launches the receive phase */

/* The arguments of anyep_dispatch. Versioned like anyep_config_t (struct_size first); `mode` says
 * which mode's fields are filled in and must be the handle's (a mismatch is refused with
 * ANYEP_ERR_INVALID_ARGUMENT). A field of the other mode must stay NULL. Tensors as
 * anyep_get_dispatch_outputs (LL) or anyep_ht_get_dispatch_outputs (HT) describe them.
 *
 * LL: x bfloat16 [N, H] (N as topk_idx); outputs recv_x, recv_scales (FP8 dispatch only, else
 *     NULL), recv_count. flags: 0 or ANYEP_SEND_ONLY.
 * HT: x [N, H]: bfloat16, or float8 e4m3 with x_scales (float32 [N, H/128] or int32 [N, H/512]
 *     packed UE8M0, any strides) when the group's dispatch_dtype is FP8 (NULL otherwise);
 *     topk_weights float32 [N, K]. Each token goes once to every rank that owns one of its experts.
 *     Outputs recv_x, recv_scales (FP8 only), recv_topk_idx, recv_topk_weights. Once per handle, on
 *     the handle's creation stream or one that waits for it. flags: 0. */
typedef struct anyep_dispatch_args {
  size_t struct_size;
  anyep_mode_t mode;
  const anyep_tensor_t* x;
  const anyep_tensor_t* x_scales;     /* HT */
  const anyep_tensor_t* topk_weights; /* HT */
  const anyep_tensor_t* recv_x;
  const anyep_tensor_t* recv_scales;
  const anyep_tensor_t* recv_count;        /* LL */
  const anyep_tensor_t* recv_topk_idx;     /* HT */
  const anyep_tensor_t* recv_topk_weights; /* HT */
  uint32_t flags;
  anyep_stream_t stream; /* stream-ordered: no host synchronisation */
} anyep_dispatch_args_t;

static inline void anyep_dispatch_args_init(anyep_dispatch_args_t* a, anyep_mode_t mode) {
  memset(a, 0, sizeof(*a));
  a->struct_size = sizeof(*a);
  a->mode = mode;
}

/* The arguments of anyep_combine, versioned and moded as anyep_dispatch_args_t.
 *
 * LL: x, the experts' outputs (bfloat16 [L, R*T, H], rows as dispatch delivered them), go back to
 *     their tokens' ranks: out[t] (bfloat16 [N, H]) = sum over k of topk_weights[t, k] * output of
 *     expert topk_idx[t, k] (topk_weights float32 [N, K]). flags: 0 or ANYEP_SEND_ONLY.
 * HT: x (bfloat16 [M, H], rows as the handle's dispatch delivered them) goes back to the tokens'
 *     ranks: out[t] (bfloat16 [N, H]) = the UNWEIGHTED sum of token t's rows over the ranks it went
 *     to (in float, rounded once; across nodes each node's sum is rounded to BF16 before home adds
 *     them in float and rounds once more; weight the rows before, as DeepEP). topk_weights (float32
 *     [M, K]) may be NULL; given, out_topk_weights (float32 [N, K]) receives its rows summed the
 *     same way. flags: 0.
 * After the handle's dispatch. Stream-ordered. */
typedef struct anyep_combine_args {
  size_t struct_size;
  anyep_mode_t mode;
  const anyep_tensor_t* x;
  const anyep_tensor_t* topk_weights;
  const anyep_tensor_t* out;
  const anyep_tensor_t* out_topk_weights; /* HT */
  uint32_t flags;
  anyep_stream_t stream;
} anyep_combine_args_t;

static inline void anyep_combine_args_init(anyep_combine_args_t* a, anyep_mode_t mode) {
  memset(a, 0, sizeof(*a));
  a->struct_size = sizeof(*a);
  a->mode = mode;
}

/* Sends each token to its experts' ranks, by the handle's mode (anyep_dispatch_args_t). */
anyep_status_t anyep_dispatch(anyep_handle_t handle, const anyep_dispatch_args_t* args);
/* Returns the experts' outputs to their tokens' ranks, by the handle's mode (anyep_combine_args_t). */
anyep_status_t anyep_combine(anyep_handle_t handle, const anyep_combine_args_t* args);

/* LL: launches the receive phase of the handle's last ANYEP_SEND_ONLY dispatch or combine on
 * `stream` (overlap compute between the two). ANYEP_ERR_INVALID_ARGUMENT when nothing is staged. */
anyep_status_t anyep_complete(anyep_handle_t handle, anyep_stream_t stream);

/* HT: M, the rows this rank receives, and per local expert (num_experts / num_ranks entries; may be
 * NULL) the rows routed to it, rounded up to expert_alignment. per_expert_len: room in per_expert. */
anyep_status_t anyep_ht_get_recv_counts(anyep_handle_t handle, int64_t* num_recv, int32_t* per_expert,
                                        int64_t per_expert_len);

/* HT: the outputs the handle's dispatch fills (data NULL, on the group's device; any pointer may be
 * NULL): recv_x [M, H] of the dispatch dtype, recv_scales (FP8: as x_scales' dtype, [M, S]; else
 * ndim 0), recv_topk_idx int64 [M, K] (the receiver's local expert ids, -1 for another rank's
 * expert), recv_topk_weights float32 [M, K] (0 where recv_topk_idx is -1). Rows are ordered by
 * source rank, then source token; across nodes of k ranks, by the rank of this node that forwarded
 * them (local index f), then source node, then source token (source rank node * k + f). */
anyep_status_t anyep_ht_get_dispatch_outputs(anyep_handle_t handle, anyep_tensor_t* recv_x, anyep_tensor_t* recv_scales,
                                             anyep_tensor_t* recv_topk_idx, anyep_tensor_t* recv_topk_weights);

/* ---- deprecated names -------------------------------------------------------------------------
 * The first releases had HT-only handle calls beside positional LL ones. The HT calls remain as
 * wrappers of the mode-generic calls above and will be removed in a later release. */
ANYEP_DEPRECATED("use anyep_handle_create(group, ANYEP_MODE_HT, ...)")
anyep_status_t anyep_ht_handle_create(anyep_group_t group, const anyep_tensor_t* topk_idx,
                                      const anyep_ht_options_t* options, anyep_stream_t stream, anyep_handle_t* handle);
ANYEP_DEPRECATED("use anyep_dispatch with anyep_dispatch_args_t of ANYEP_MODE_HT")
anyep_status_t anyep_ht_dispatch(anyep_handle_t handle, const anyep_tensor_t* x, const anyep_tensor_t* x_scales,
                                 const anyep_tensor_t* topk_weights, const anyep_tensor_t* recv_x,
                                 const anyep_tensor_t* recv_scales, const anyep_tensor_t* recv_topk_idx,
                                 const anyep_tensor_t* recv_topk_weights, anyep_stream_t stream);
ANYEP_DEPRECATED("use anyep_combine with anyep_combine_args_t of ANYEP_MODE_HT")
anyep_status_t anyep_ht_combine(anyep_handle_t handle, const anyep_tensor_t* x, const anyep_tensor_t* topk_weights,
                                const anyep_tensor_t* out, const anyep_tensor_t* out_topk_weights,
                                anyep_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* ANYEP_ANYEP_H */
