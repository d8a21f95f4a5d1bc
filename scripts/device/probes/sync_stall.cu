// Diagnostic: does a host thread blocked in a synchronous CUDA call stall another thread's
// async copies/event queries in the same process? Thread A launches a kernel that spins until a
// host flag is set, then waits in mode M; thread B issues a D2D copy + event and, once the event
// fired, sets the flag. Prints B's call latencies.
#include "common/gpu_runtime.h"

#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "spin.cuh"

int run(const char* mode, bool batch, size_t bytes) {
  cudaSetDevice(0);
  int *flag_h, *flag_d, *to;
  cudaHostAlloc(&flag_h, 4, cudaHostAllocMapped);
  *flag_h = 0;
  cudaHostGetDevicePointer((void**)&flag_d, flag_h, 0);
  cudaMallocManaged(&to, 4);
  *to = 0;
  void *src, *dst;
  cudaMalloc(&src, bytes);
  cudaMalloc(&dst, bytes);
  cudaStream_t s1 = new_stream(), s2 = new_stream();
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  cudaDeviceSynchronize();
  std::atomic<bool> launched{false};
  double t_copy = -1, t_rec = -1, t_done = -1;
  std::thread B([&] {
    cudaSetDevice(0);
    while (!launched) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto t0 = clk::now();
    cudaError_t e;
#if CUDART_VERSION >= 12080
    if (batch) {
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
      void* d[2] = {dst, (char*)dst + bytes / 2};
      void* s[2] = {src, (char*)src + bytes / 2};
      size_t z[2] = {bytes / 2, bytes / 2};
      size_t first = 0;
#if CUDART_VERSION >= 13000
      e = cudaMemcpyBatchAsync(d, s, z, 2, &attr, &first, 1, s2);
#else
      size_t fi = 0;
      e = cudaMemcpyBatchAsync(d, s, z, 2, &attr, &first, 1, &fi, s2);
#endif
    } else
#endif
      e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s2);
    t_copy = ms(t0);
    auto t1 = clk::now();
    cudaEventRecord(ev, s2);
    t_rec = ms(t1);
    auto t2 = clk::now();
    while (cudaEventQuery(ev) == cudaErrorNotReady && ms(t2) < 4000) {
    }
    t_done = ms(t2);
    if (e != cudaSuccess) printf("  copy error %s\n", cudaGetErrorString(e));
    *(volatile int*)flag_h = 1;
  });
  spin<<<1, 1, 0, s1>>>(flag_d, 3000000000ull, to);
  launched = true;
  auto t0 = clk::now();
  if (!strcmp(mode, "sync_stream"))
    cudaStreamSynchronize(s1);
  else if (!strcmp(mode, "sync_device"))
    cudaDeviceSynchronize();
  else if (!strcmp(mode, "event_sync")) {
    cudaEvent_t e2;
    cudaEventCreate(&e2);
    cudaEventRecord(e2, s1);
    cudaEventSynchronize(e2);
  } else if (!strcmp(mode, "memcpy_legacy")) {
    int v;
    cudaMemcpy(&v, to, 4, cudaMemcpyDeviceToHost);
    cudaStreamSynchronize(s1);
  } else {
    while (cudaStreamQuery(s1) == cudaErrorNotReady) std::this_thread::yield();
  }
  double t_wait = ms(t0);
  B.join();
  cudaDeviceSynchronize();
  printf(
      "mode=%-13s batch=%d bytes=%zu: A waited %.1f ms; B copy call %.2f ms, record %.2f ms, until event %.2f ms; "
      "kernel timed out=%d\n",
      mode, batch, bytes, t_wait, t_copy, t_rec, t_done, *to);
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  const char* modes[] = {"poll", "sync_stream", "sync_device", "event_sync", "memcpy_legacy"};
  int other = argc > 1 ? atoi(argv[1]) : 0;  // 1: a second process spins a kernel meanwhile
  pid_t child = -1;
  if (other) {
    child = fork();
    if (child == 0) {
      cudaSetDevice(0);
      int *f, *fd, *t;
      cudaHostAlloc(&f, 4, cudaHostAllocMapped);
      *f = 0;
      cudaHostGetDevicePointer((void**)&fd, f, 0);
      cudaMalloc(&t, 4);
      spin<<<1, 1>>>(fd, 20000000000ull, t);  // spins 20 s in another context
      cudaDeviceSynchronize();
      _exit(0);
    }
    sleep(2);
  }
  for (bool batch : {false, true})
    for (const char* m : modes) run(m, batch, 1 << 20);
  if (child > 0) {
    kill(child, 9);
    waitpid(child, nullptr, 0);
  }
  return 0;
}
