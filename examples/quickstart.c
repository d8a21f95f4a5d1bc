/* anyep/examples/quickstart.c — a first LL round trip through the C API, on one GPU.
 *
 * One rank: a group, one low-latency handle, a dispatch of 8 tokens to 2 experts each, the
 * experts as the identity, a combine with weights 0.5 + 0.5, and a check that every token comes
 * back unchanged. More ranks take the same calls with cfg.rank, cfg.num_ranks and a bootstrap that
 * reaches them (docs/capi.md). Exits 0 when the check passes, 1 when it fails, 77 (with the reason)
 * where there is no GPU or the program was built without the CUDA runtime.
 * Build: examples/CMakeLists.txt (target quickstart), or
 *   cc -std=c99 quickstart.c $(pkg-config --cflags --libs anyep) -DANYEP_EXAMPLE_CUDA -lcudart
 */
#include <anyep/anyep.h>
#include <stdio.h>
#include <string.h>

#ifdef ANYEP_EXAMPLE_CUDA
#include <cuda_runtime_api.h>

enum { T = 8, H = 512, E = 8, K = 2 }; /* tokens, hidden, experts, experts per token */

#define ANYEP_OK(call)                                                                                   \
  do {                                                                                                   \
    anyep_status_t s_ = (call);                                                                          \
    if (s_ != ANYEP_SUCCESS) {                                                                           \
      fprintf(stderr, "quickstart: %s: %s: %s\n", #call, anyep_status_name(s_), anyep_get_last_error()); \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)
#define CUDA_OK(call)                                                         \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "quickstart: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

/* One rank is its own allgather: its contribution is the result. */
static int self_allgather(const void* send, void* recv, size_t bytes, void* user) {
  (void)user;
  memcpy(recv, send, bytes);
  return 0;
}

/* A row-major device tensor descriptor of `ndim` sizes. */
static anyep_tensor_t tensor(void* data, anyep_dtype_t dtype, int ndim, const int64_t* shape) {
  anyep_tensor_t t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
  return t;
}

static uint16_t bf16(float f) { /* exact for the small integers used here */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static int run(void) {
  anyep_config_t cfg;
  anyep_config_init(&cfg);
  cfg.num_experts = E;
  cfg.max_tokens_per_rank = T;
  cfg.hidden = H;
  cfg.bootstrap.kind = ANYEP_BOOTSTRAP_ALLGATHER;
  cfg.bootstrap.allgather = self_allgather;
  anyep_group_t group;
  ANYEP_OK(anyep_group_create(&cfg, &group));

  /* Inputs: token t is the value t + 1 everywhere, routed to experts t and t + 1. */
  static uint16_t x_host[T * H], out_host[T * H];
  int64_t idx_host[T * K];
  float w_host[T * K];
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) x_host[t * H + h] = bf16((float)(t + 1));
    for (int k = 0; k < K; ++k) idx_host[t * K + k] = (t + k) % E, w_host[t * K + k] = 0.5f;
  }
  void *x, *idx, *w, *out, *recv_x, *recv_count;
  CUDA_OK(cudaMalloc(&x, sizeof x_host));
  CUDA_OK(cudaMalloc(&idx, sizeof idx_host));
  CUDA_OK(cudaMalloc(&w, sizeof w_host));
  CUDA_OK(cudaMalloc(&out, sizeof out_host));
  CUDA_OK(cudaMemcpy(x, x_host, sizeof x_host, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(idx, idx_host, sizeof idx_host, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(w, w_host, sizeof w_host, cudaMemcpyHostToDevice));

  /* The receive side's shapes come from the group: recv_x [L, R*T, H], recv_count [L]. */
  anyep_tensor_t rx, rc;
  ANYEP_OK(anyep_get_dispatch_outputs(group, &rx, NULL, &rc));
  CUDA_OK(cudaMalloc(&recv_x, (size_t)(rx.shape[0] * rx.shape[1] * rx.shape[2]) * 2));
  CUDA_OK(cudaMalloc(&recv_count, (size_t)rc.shape[0] * 4));
  rx.data = recv_x;
  rc.data = recv_count;

  const int64_t xs[2] = {T, H}, ks[2] = {T, K};
  anyep_tensor_t tx = tensor(x, ANYEP_BFLOAT16, 2, xs), tidx = tensor(idx, ANYEP_INT64, 2, ks);
  anyep_tensor_t tw = tensor(w, ANYEP_FLOAT32, 2, ks), tout = tensor(out, ANYEP_BFLOAT16, 2, xs);
  anyep_handle_t handle;
  ANYEP_OK(anyep_handle_create(group, ANYEP_MODE_LL, &tidx, NULL, NULL, &handle));

  anyep_dispatch_args_t d;
  anyep_dispatch_args_init(&d, ANYEP_MODE_LL);
  d.x = &tx;
  d.recv_x = &rx;
  d.recv_count = &rc;
  ANYEP_OK(anyep_dispatch(handle, &d));
  /* The experts would run here on recv_x; as the identity, their output is recv_x itself. */
  anyep_combine_args_t c;
  anyep_combine_args_init(&c, ANYEP_MODE_LL);
  c.x = &rx;
  c.topk_weights = &tw;
  c.out = &tout;
  ANYEP_OK(anyep_combine(handle, &c));
  CUDA_OK(cudaDeviceSynchronize());

  /* out[t] = 0.5 * x[t] + 0.5 * x[t] = x[t], exactly in BF16. */
  CUDA_OK(cudaMemcpy(out_host, out, sizeof out_host, cudaMemcpyDeviceToHost));
  const int ok = memcmp(out_host, x_host, sizeof x_host) == 0;
  printf("quickstart: %d tokens dispatched to %d experts each and combined: %s\n", T, K,
         ok ? "every token came back unchanged" : "FAILED, out differs from x");

  ANYEP_OK(anyep_handle_destroy(handle));
  ANYEP_OK(anyep_group_destroy(group));
  cudaFree(x), cudaFree(idx), cudaFree(w), cudaFree(out), cudaFree(recv_x), cudaFree(recv_count);
  return ok ? 0 : 1;
}
#endif

int main(void) {
  int32_t gpus = 0;
  if (anyep_get_device_count(&gpus) != ANYEP_SUCCESS || gpus == 0) {
    printf("quickstart: no GPU visible to anyep (none here, or the library was built without CUDA)\n");
    return 77;
  }
#ifdef ANYEP_EXAMPLE_CUDA
  return run();
#else
  printf("quickstart: no GPU data path: built without the CUDA runtime (define ANYEP_EXAMPLE_CUDA, link cudart)\n");
  return 77;
#endif
}
