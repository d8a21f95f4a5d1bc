// anyep/src/kernels/ll_combine.cu — low-latency combine (send and receive phases).
//
// Send (on the rank owning the experts): one block per local expert (grid-strided). For every
// row of recv_x that came from source rank r, the BF16 expert output goes straight into the
// private slot (token, top-k slot) on r (ll_layout.h: combine slot). After all rows of the
// expert, one thread per rank stores the expert's flag on that rank (release, system scope), so
// the flag is ordered after the rows; ranks that received nothing from this expert get the flag
// too, which is how a home rank learns "nothing more is coming".
// A home rank behind the proxy: each row is staged in the dispatch slot it arrived in (half b_d of
// the handle's dispatch, slot (l, r, s): consumed already, and not rewritten before rank r has
// received this combine), a WRITE per row copies it to the home slot, and the expert's flag goes
// as a SIGNAL with kFenceCount = the rows it covers, in the same ring after them.
// Receive (home rank): one block per token: wait for the flags of the token's experts (acquire,
// system scope), then out[t] = sum_k w[t,k] * slot[t,k] in FP32, stored as BF16. The last block
// waits for the remaining flags and resets all of them for the next use of this half.
// Shrink mode (c.mask set): nothing is sent to a masked rank, and the experts of a masked owner
// are not waited for and contribute nothing; an owner whose flag times out is masked.
#include "kernels/ll_device.cuh"
#include "kernels/ll_kernels.h"

namespace anyep::ll {
namespace {

__device__ void send_phase(const CombineArgs& a) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), R = static_cast<int>(g.R), T = static_cast<int>(g.T);
  const int H = static_cast<int>(g.H);
  const int64_t RT = static_cast<int64_t>(R) * T;
  const int nvec = H / 8;  // 16-byte vectors per BF16 row
  const uint8_t* x = static_cast<const uint8_t*>(a.x);

  const bool proxy = c.proxy.rings != nullptr;
  const int bd = proxy ? *a.handle_half : 0;  // dispatch half of the handle: staging rows live there

  for (int l = blockIdx.x; l < L; l += gridDim.x) {
    for (int r = 0; r < R; ++r) {
      if (dev::rank_masked_block(c, r)) continue;  // shrink mode: nothing goes to a masked rank
      uint8_t* base = c.peers[r];
      const int64_t range = a.layout_range[static_cast<int64_t>(l) * R + r];
      const int begin = static_cast<int>(range >> 32), count = static_cast<int>(static_cast<uint32_t>(range));
      const int64_t row0 = static_cast<int64_t>(l) * RT + begin;
      if (base == nullptr) {
        if (!proxy) {
          if (threadIdx.x == 0 && count > 0) dev::report(c.err, kErrNoPeer, c.rank, c.rank * L + l, r, count);
          continue;
        }
        // Stage every row, then one WRITE per row (after a block barrier and a system fence: the
        // copy engine / NIC reads what all threads staged).
        uint8_t* stage = c.local + g.dispatch_slot_off(bd, l, r, 0) + kHeaderBytes;
        const uint64_t M = g.msg_bytes();
        for (int i = threadIdx.x; i < count * nvec; i += blockDim.x) {
          const int s = i / nvec, v = i - s * nvec;
          dev::st16(stage + s * M + v * 16, port::load16_read_once(x + (row0 + s) * 2 * H + v * 16));
        }
        __syncthreads();
        const uint32_t tag = proxy_tag(kTagCombine, c.buf, l, g.R);
        for (int s = threadIdx.x; s < count; s += blockDim.x) {
          port::fence_system();
          dev::push_write(c, tag, r, g.dispatch_slot_off(bd, l, r, s) + kHeaderBytes,
                          g.combine_slot_off(c.buf, a.src_info[row0 + s], a.src_topk[row0 + s]), g.combine_slot_bytes(),
                          c.rank * L + l);
        }
        continue;
      }
      for (int i = threadIdx.x; i < count * nvec; i += blockDim.x) {
        const int s = i / nvec, v = i - s * nvec;
        const int t = a.src_info[row0 + s], k = a.src_topk[row0 + s];
        const uint4 val = port::load16_read_once(x + (row0 + s) * 2 * H + v * 16);
        // Layout: combine slot (buf, token t on rank r, top-k slot k) — ll_layout.h.
        dev::st16(base + g.combine_slot_off(c.buf, t, k) + v * 16, val);
      }
    }
    __syncthreads();  // every row (and every WRITE push) of expert l comes before any of its flags
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
      if (dev::rank_masked(c, r)) continue;
      uint8_t* base = c.peers[r];
      const uint64_t flag = g.combine_flag_off(c.buf, c.rank * L + l);
      if (base != nullptr) {
        port::fence_system();
        // Flag after data: release at system scope covers the rows the block wrote (observed
        // through __syncthreads); the home rank reads the flag with acquire.
        port::store_release_system(reinterpret_cast<int32_t*>(base + flag), 1);
      } else if (proxy) {
        // Flag after data through the proxy: applied once the expert's `count` rows for r landed.
        const int count = static_cast<int>(static_cast<uint32_t>(a.layout_range[static_cast<int64_t>(l) * R + r]));
        dev::push_count_signal(c, proxy_tag(kTagCombine, c.buf, l, g.R), r, counter_of(flag), 1, count, c.rank * L + l);
      }
    }
  }
}

__device__ void recv_phase(const CombineArgs& a) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), H = static_cast<int>(g.H), K = c.num_topk;
  const int E = static_cast<int>(g.E);
  __shared__ const uint8_t* s_src[kMaxTopk];
  __shared__ float s_w[kMaxTopk];
  __shared__ int s_n;
  uint16_t* out = static_cast<uint16_t*>(a.out);  // BF16 bits

  for (int t = blockIdx.x; t < c.num_tokens; t += gridDim.x) {
    if (threadIdx.x == 0) s_n = 0;
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < K) {
      const int k = threadIdx.x;
      const int e = static_cast<int>(a.topk_idx[static_cast<int64_t>(t) * K + k]);
      if (e >= 0 && e < E) {
        uint64_t waited = 0;
        bool timed_out = false;
        const bool arrived = dev::wait_signal(c, c.peers[e / L] != nullptr, g.combine_flag_off(c.buf, e), e / L,
                                              &waited, &timed_out) != 0;
        if (timed_out) dev::report(c.err, kErrCombineRecvTimeout, c.rank, e, e / L, t);
        if (a.wait_recv_cost_stats)
          atomicAdd(reinterpret_cast<unsigned long long*>(a.wait_recv_cost_stats + e / L),
                    static_cast<unsigned long long>(waited));
        // Shrink mode: an expert of a masked owner contributes nothing (its slot holds no row).
        if (arrived || timed_out) {
          const int j = atomicAdd(&s_n, 1);
          s_src[j] = c.local + g.combine_slot_off(c.buf, t, k);
          s_w[j] = a.topk_weights[static_cast<int64_t>(t) * K + k];
        }
      }
    }
    __syncthreads();  // the waiting threads' acquires cover the block's reads below
    const int n = s_n;
    for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int j = 0; j < n; ++j) {
        const uint4 raw = dev::ld_recv(reinterpret_cast<const uint4*>(s_src[j]) + v, c.host_mem);
        const uint32_t* h = reinterpret_cast<const uint32_t*>(&raw);  // BF16 pairs
        const float w = s_w[j];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = port::bf16x2_to_float2(h[i]);
          acc[2 * i] += w * f.x;
          acc[2 * i + 1] += w * f.y;
        }
      }
      uint4 o;
      uint32_t* ob = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
      for (int i = 0; i < 4; ++i) ob[i] = port::float2_to_bf16x2(acc[2 * i], acc[2 * i + 1]);
      dev::st16(out + static_cast<int64_t>(t) * H + v * 8, o);
    }
    __syncthreads();  // s_src/s_w reuse
  }
  if (dev::last_block(&c.ws.blocks_done[1])) {
    // Every expert signals every rank; wait for the flags no token waited on, then reset all of
    // them (the next writer of this half is causally after this kernel).
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      const bool direct = c.peers[e / L] != nullptr;
      const uint64_t flag = g.combine_flag_off(c.buf, e);
      bool timed_out = false;
      dev::wait_signal(c, direct, flag, e / L, nullptr, &timed_out);  // a masked owner: no wait
      if (timed_out) dev::report(c.err, kErrCombineRecvTimeout, c.rank, e, e / L, -1);
      dev::reset_signal(c, direct, flag);
    }
  }
}

__global__ void __launch_bounds__(kBlockThreads, 1) combine_kernel(const ANYEP_GRID_CONSTANT CombineArgs a) {
  if (a.c.phases & kPhaseSend) send_phase(a);
  if (a.c.phases & kPhaseRecv) recv_phase(a);
}

}  // namespace

cudaError_t launch_combine(const CombineArgs& a, cudaStream_t stream) {
  combine_kernel<<<a.c.num_blocks, kBlockThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace anyep::ll
