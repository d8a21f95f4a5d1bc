// anyep/tests/gpu/transport/alltoall.h — the all-to-all exercise shared by the single-process
// tests and the multi-process worker: every rank writes K writes of random sizes (0 B..max_len)
// with immediates to every rank (itself included) into a slot of its own in the receiver's
// buffer. The receiver checks each write's bytes the moment its immediate arrives (so an
// immediate that overtakes its data fails), every immediate exactly once with the right source,
// and at the end every byte of its receive buffer (so a stray write fails too).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/error.h"
#include "common/gpu_runtime.h"
#include "transport/transport.h"

namespace anyep::test {

struct AllToAllConfig {
  uint64_t seed = 1;
  uint32_t writes_per_peer = 32;  // K
  uint64_t max_len = 512 << 10;
  double timeout_s = 30;
};

inline constexpr uint8_t kRecvFill = 0xEE;

inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Byte i of rank src's send buffer.
inline uint8_t pattern(uint32_t src, uint64_t i) {
  return static_cast<uint8_t>(mix64((uint64_t{src} << 48) ^ (i >> 3)) >> (8 * (i & 7)));
}

inline uint64_t send_bytes(const AllToAllConfig& c) { return c.max_len + 4096; }
inline uint64_t slot_bytes(const AllToAllConfig& c) { return c.max_len + 64; }
inline uint64_t recv_bytes(const AllToAllConfig& c, uint32_t n) {
  return uint64_t{n} * c.writes_per_peer * slot_bytes(c);
}

struct PlannedWrite {
  uint64_t src_off, dst_off, len;
};
// Write k from src to dst; both sides compute the same plan from the seed.
inline PlannedWrite plan_write(const AllToAllConfig& c, uint32_t src, uint32_t dst, uint32_t k) {
  uint64_t r = mix64(c.seed ^ (uint64_t{src} << 40) ^ (uint64_t{dst} << 20) ^ k);
  uint64_t len = 0;
  if (r % 16 != 0) {                    // 1 in 16 writes is empty (immediate only)
    uint64_t bits = mix64(r + 1) % 21;  // log-uniform 1 B .. 1 MiB, capped at max_len
    len = 1 + mix64(r + 2) % (uint64_t{1} << bits);
    if (len > c.max_len) len = c.max_len;
  }
  uint64_t src_off = mix64(r + 3) % (send_bytes(c) - len + 1);
  uint64_t dst_off = (uint64_t{src} * c.writes_per_peer + k) * slot_bytes(c) + mix64(r + 4) % 64;
  return {src_off, dst_off, len};
}

// Throws CudaError naming the step that failed.
inline void fill_buffers(uint32_t rank, const AllToAllConfig& c, uint32_t n, uint8_t* send_dev, uint8_t* recv_dev) {
  std::vector<uint8_t> h(send_bytes(c));
  for (uint64_t i = 0; i < h.size(); ++i) h[i] = pattern(rank, i);
  cuda_check(cudaMemcpy(send_dev, h.data(), h.size(), cudaMemcpyHostToDevice), "all-to-all", "fill send buffer");
  cuda_check(cudaMemset(recv_dev, kRecvFill, recv_bytes(c, n)), "all-to-all", "fill receive buffer");
  cuda_check(cudaDeviceSynchronize(), "all-to-all", "fill buffers");
}

// Runs the exchange on a connected transport whose region `send_mr` is send_dev (send_bytes)
// and whose region `recv_mr` (same id on every rank) is recv_dev. Returns "" or what failed.
// `peer_failed` (optional) returns why another rank gave up, so this one stops waiting for it.
inline std::string run_alltoall(transport::Transport& t, const AllToAllConfig& c, transport::MrId send_mr,
                                transport::MrId recv_mr, const uint8_t* recv_dev,
                                const std::function<std::string()>& peer_failed = {}) {
  using namespace anyep::transport;
  const uint32_t n = t.num_ranks(), me = t.rank(), K = c.writes_per_peer;
  const size_t total = size_t{n} * K;
  std::vector<uint8_t> comp_seen(total, 0), imm_seen(total, 0);
  std::vector<uint32_t> imms_from(n, 0);
  size_t posted = 0, comps = 0, imms = 0, spins = 0;
  std::vector<uint8_t> host;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(c.timeout_s);
  const std::string who = "rank " + std::to_string(me) + ": ";
  Completion cq[64];
  ImmEvent iq[64];
  while (posted < total || comps < total || imms < total) {
    if (posted < total) {
      uint32_t k = static_cast<uint32_t>(posted / n), d = static_cast<uint32_t>((posted + me) % n);
      PlannedWrite p = plan_write(c, me, d, k);
      WriteDesc w{d, send_mr, p.src_off, recv_mr, p.dst_off, p.len, true, k, uint64_t{d} * K + k};
      int rc = t.post_write(w);
      if (rc == 0)
        ++posted;
      else if (rc != -EAGAIN)
        return who + "post_write failed (" + std::to_string(rc) + "): " + t.last_error();
    }
    size_t nc = 0, ni = 0;
    if (t.poll(cq, 64, &nc, iq, 64, &ni)) return who + "poll failed: " + t.last_error();
    for (size_t i = 0; i < nc; ++i) {
      if (cq[i].status) return who + "completion " + std::to_string(cq[i].context) + " failed: " + t.last_error();
      if (cq[i].context >= total || comp_seen[cq[i].context]++)
        return who + "unexpected or duplicate completion context " + std::to_string(cq[i].context);
      ++comps;
    }
    for (size_t i = 0; i < ni; ++i) {
      uint32_t src = iq[i].src_rank, k = iq[i].imm;
      if (src >= n || k >= K)
        return who + "immediate " + std::to_string(k) + " from impossible source " + std::to_string(src);
      if (imm_seen[size_t{src} * K + k]++)
        return who + "immediate " + std::to_string(k) + " from rank " + std::to_string(src) + " delivered twice";
      ++imms, ++imms_from[src];
      PlannedWrite p = plan_write(c, src, me, k);
      if (!p.len) continue;
      host.resize(p.len);
      try {  // a rank's thread reports failures as its result, never by throwing
        cuda_check(cudaMemcpy(host.data(), recv_dev + p.dst_off, p.len, cudaMemcpyDeviceToHost), "all-to-all",
                   "read back");
      } catch (const CudaError& e) {
        return who + e.what();
      }
      for (uint64_t j = 0; j < p.len; ++j)
        if (host[j] != pattern(src, p.src_off + j))
          return who + "immediate " + std::to_string(k) + " from rank " + std::to_string(src) +
                 " arrived before its data: byte " + std::to_string(j) + " of " + std::to_string(p.len) + " is " +
                 std::to_string(host[j]) + ", expected " + std::to_string(pattern(src, p.src_off + j));
    }
    if (peer_failed && (++spins & 1023) == 0)
      if (std::string why = peer_failed(); !why.empty()) return who + "stopped: another rank failed";
    if (std::chrono::steady_clock::now() > deadline) {
      std::string m = who + "timed out after " + std::to_string(c.timeout_s) + " s: posted " + std::to_string(posted) +
                      "/" + std::to_string(total) + ", completions " + std::to_string(comps) + ", immediates " +
                      std::to_string(imms) + "; per source:";
      for (uint32_t s = 0; s < n; ++s) (((m += ' ') += std::to_string(s)) += ':') += std::to_string(imms_from[s]);
      m += " of " + std::to_string(K) + " each";
      return m;
    }
  }
  return {};
}

// After every immediate arrived: the whole receive buffer equals the fill plus every planned write.
// Returns "" or the first wrong byte; throws CudaError when the buffer cannot be read.
inline std::string check_recv_buffer(uint32_t me, uint32_t n, const AllToAllConfig& c, const uint8_t* recv_dev) {
  std::vector<uint8_t> want(recv_bytes(c, n), kRecvFill), got(want.size());
  for (uint32_t src = 0; src < n; ++src)
    for (uint32_t k = 0; k < c.writes_per_peer; ++k) {
      PlannedWrite p = plan_write(c, src, me, k);
      for (uint64_t j = 0; j < p.len; ++j) want[p.dst_off + j] = pattern(src, p.src_off + j);
    }
  cuda_check(cudaMemcpy(got.data(), recv_dev, got.size(), cudaMemcpyDeviceToHost),
             "all-to-all rank " + std::to_string(me), "read back");
  for (uint64_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return "rank " + std::to_string(me) + ": receive buffer byte " + std::to_string(i) + " (slot of source " +
             std::to_string(i / slot_bytes(c) / c.writes_per_peer) + ") is " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]);
  return {};
}

}  // namespace anyep::test
