// Diagnostic: does the first cudaMemcpyAsync into a CUDA-IPC-mapped peer allocation block while a
// kernel of this process spins? And does a warm-up copy at import avoid it?
#include "common/gpu_runtime.h"

#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "spin.cuh"

constexpr int kAllocs = 5;
constexpr size_t kBytes = 64 << 20;

void trial(const char* name, void* dst, void* src, size_t bytes, bool spin_own) {
  int *flag_h, *flag_d, *to;
  cudaHostAlloc(&flag_h, 4, cudaHostAllocMapped);
  *flag_h = 0;
  cudaHostGetDevicePointer((void**)&flag_d, flag_h, 0);
  cudaMalloc(&to, 4);
  cudaMemset(to, 0, 4);
  cudaStream_t s1 = new_stream(), s2 = new_stream();
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  cudaDeviceSynchronize();
  if (spin_own) spin<<<1, 1, 0, s1>>>(flag_d, 3000000000ull, to);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t0 = clk::now();
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s2);
  double t_copy = ms(t0);
  cudaEventRecord(ev, s2);
  auto t2 = clk::now();
  while (cudaEventQuery(ev) == cudaErrorNotReady && ms(t2) < 4000) {
  }
  double t_done = ms(t2);
  *(volatile int*)flag_h = 1;
  cudaDeviceSynchronize();
  int tv = 0;
  cudaMemcpy(&tv, to, 4, cudaMemcpyDeviceToHost);
  printf("%-40s bytes=%zu: copy call %.2f ms (%s), until event %.2f ms, own kernel timed out=%d\n", name, bytes, t_copy,
         cudaGetErrorName(e), t_done, tv);
  fflush(stdout);
  cudaFreeHost(flag_h);
  cudaFree(to);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaEventDestroy(ev);
}

int main() {
  int to_parent[2], to_child[2];
  pipe(to_parent);
  pipe(to_child);
  pid_t child = fork();
  if (child == 0) {
    cudaSetDevice(0);
    cudaIpcMemHandle_t h[kAllocs];
    for (int i = 0; i < kAllocs; ++i) {
      void* p;
      cudaMalloc(&p, kBytes);
      cudaMemset(p, 0, kBytes);
      cudaIpcGetMemHandle(&h[i], p);
    }
    cudaDeviceSynchronize();
    write(to_parent[1], h, sizeof h);
    char c;
    while (read(to_child[0], &c, 1) == 1) {
      if (c == 's') {  // spin a kernel in this (the exporter's) context for 1.5 s
        int *f, *fd, *t;
        cudaHostAlloc(&f, 4, cudaHostAllocMapped);
        *f = 0;
        cudaHostGetDevicePointer((void**)&fd, f, 0);
        cudaMalloc(&t, 4);
        spin<<<1, 1>>>(fd, 1500000000ull, t);
        write(to_parent[1], "k", 1);
        cudaDeviceSynchronize();
      } else
        break;
    }
    _exit(0);
  }
  cudaIpcMemHandle_t h[kAllocs];
  read(to_parent[0], h, sizeof h);
  cudaSetDevice(0);
  void* src;
  cudaMalloc(&src, kBytes);
  void* local;
  cudaMalloc(&local, kBytes);
  void* m[kAllocs];
  for (int i = 0; i < kAllocs; ++i) cudaIpcOpenMemHandle(&m[i], h[i], cudaIpcMemLazyEnablePeerAccess);
  // 0: cold mapping, own kernel spinning
  trial("0 cold ipc, own kernel spins", m[0], src, 4096, true);
  trial("0 again (mapping used), own kernel spins", m[0], src, 4096, true);
  trial("0 again, other offset", (char*)m[0] + (32 << 20), src, 4096, true);
  // 1: warm-up by a read copy ipc->local at import, synchronized
  cudaMemcpy(local, m[1], 16, cudaMemcpyDefault);
  cudaDeviceSynchronize();
  trial("1 after warm-up read (16 B), spins", m[1], src, 4096, true);
  // 2: warm-up by a 0-byte copy
  cudaMemcpy(m[2], src, 0, cudaMemcpyDefault);
  cudaDeviceSynchronize();
  trial("2 after 0-byte warm-up, spins", m[2], src, 4096, true);
  // 3: cold, own kernel NOT spinning (control)
  trial("3 cold ipc, nothing spinning", m[3], src, 4096, false);
  // 4: warm mapping; the exporter's context spins, ours does not
  cudaMemcpy(local, m[4], 16, cudaMemcpyDefault);
  cudaDeviceSynchronize();
  write(to_child[1], "s", 1);
  char k;
  read(to_parent[0], &k, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  trial("4 warm ipc, exporter's kernel spins", m[4], src, 4096, false);
  trial("4 warm ipc, 8 MiB", m[4], src, 8 << 20, false);
  // 5: local D2D while own kernel spins (control)
  trial("5 local D2D, own kernel spins", local, src, 4096, true);
  write(to_child[1], "q", 1);
  waitpid(child, nullptr, 0);
  return 0;
}
