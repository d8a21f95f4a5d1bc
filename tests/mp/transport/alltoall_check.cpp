#include "alltoall_check.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace anyep::mptest {

namespace {
using transport::Completion;
using transport::ImmEvent;
using transport::MemKind;
using transport::WriteDesc;

constexpr uint32_t kImmOnly = 0x800000;  // imm-only messages: kImmOnly | src

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Size of write j from src to dst: the same formula on both sides, so no sizes travel.
uint64_t size_of(const AlltoallSpec& s, uint32_t src, uint32_t dst, uint32_t j) {
  if (j == 0) return 0;
  if (j == 1) return s.max_bytes;
  double u =
      static_cast<double>(mix(s.seed ^ (uint64_t{src} << 40) ^ (uint64_t{dst} << 20) ^ j) >> 11) / 9007199254740992.0;
  return static_cast<uint64_t>(std::exp(u * std::log(static_cast<double>(s.max_bytes) + 1.0))) - 1;
}
uint8_t byte_at(uint32_t src, uint32_t dst, uint32_t j, uint64_t i) {
  return static_cast<uint8_t>(mix((uint64_t{src} << 48) ^ (uint64_t{dst} << 32) ^ (uint64_t{j} << 24) ^ (i >> 3)) >>
                              (8 * (i & 7)));
}
std::string where(uint32_t me, const std::string& what) { return "rank " + std::to_string(me) + ": " + what; }
}  // namespace

AlltoallStats run_alltoall(transport::Transport& t, transport::Bootstrap& b, const AlltoallSpec& spec) {
  const uint32_t me = t.rank(), n = t.num_ranks(), W = spec.writes_per_peer;
  if (W < 2 || W >= 4096) throw std::runtime_error("writes_per_peer must be in [2, 4096)");
  // Layouts: outgoing bytes packed by (dst, j); incoming by (src, j).
  std::vector<std::vector<uint64_t>> out_off(n, std::vector<uint64_t>(W)), in_off(n, std::vector<uint64_t>(W));
  uint64_t out_total = 0, in_total = 0;
  for (uint32_t p = 0; p < n; ++p)
    for (uint32_t j = 0; j < W && p != me; ++j) {
      out_off[p][j] = out_total;
      out_total += size_of(spec, me, p, j);
      in_off[p][j] = in_total;
      in_total += size_of(spec, p, me, j);
    }
  std::vector<uint8_t> src(out_total + 1), dst(in_total + 1, 0);
  for (uint32_t p = 0; p < n; ++p)
    for (uint32_t j = 0; j < W && p != me; ++j)
      for (uint64_t i = 0; i < size_of(spec, me, p, j); ++i) src[out_off[p][j] + i] = byte_at(me, p, j, i);
  auto sid = t.register_memory(src.data(), src.size(), MemKind::kHost);
  auto did = t.register_memory(dst.data(), dst.size(), MemKind::kHost);
  // Everyone registers (src, dst) in that order: the peer's dst region has id `did` everywhere.
  transport::connect_all(t, b, {sid, did});
  b.barrier();

  // In-region offsets of peer p's incoming layout for me == p's out layout to me: recompute.
  auto remote_off = [&](uint32_t p, uint32_t j) {
    uint64_t off = 0;
    for (uint32_t q = 0; q < n; ++q)
      for (uint32_t k = 0; k < W && q != p; ++k) {
        if (q == me && k == j) return off;
        off += size_of(spec, q, p, k);
      }
    throw std::runtime_error("layout");
  };
  std::vector<WriteDesc> posts;
  for (uint32_t step = 1; step < n; ++step) {  // stagger destinations so not everyone hits rank 0 first
    uint32_t p = (me + step) % n;
    for (uint32_t j = 0; j < W; ++j)
      posts.push_back({p, sid, out_off[p][j], did, remote_off(p, j), size_of(spec, me, p, j), true, me * 4096 + j,
                       uint64_t{p} * 4096 + j});
  }
  const size_t expect_comps = posts.size() + (n - 1);
  const size_t expect_imms = size_t{n - 1} * (W + 1);
  std::vector<std::vector<uint8_t>> seen(n, std::vector<uint8_t>(W + 1, 0));
  std::vector<uint8_t> comp_seen(n * 4096 + n, 0);
  AlltoallStats st;
  size_t comps = 0, next = 0, imm_sent = 0;
  Completion c[64];
  ImmEvent im[64];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(spec.timeout_s);
  while (comps < expect_comps || st.imms_received < expect_imms) {
    // Post as much as the transport takes; -EAGAIN means poll first. Even ranks post one write
    // per call, odd ranks in batches, so that both entry points carry the same checked traffic.
    while (next < posts.size()) {
      size_t sent = 0;
      int rc = 0;
      if (me % 2 == 0) {
        rc = t.post_write(posts[next]);
        sent = rc == 0;
      } else {
        rc = t.post_writes(posts.data() + next, posts.size() - next, &sent);
        if (sent > posts.size() - next)
          throw std::runtime_error(where(me, "post_writes reported more writes than it was given"));
      }
      next += sent;
      if (rc == -EAGAIN) {
        ++st.eagain;
        break;
      }
      if (rc) throw std::runtime_error(where(me, "post_write(s) failed: " + t.last_error()));
    }
    while (next == posts.size() && imm_sent < n - 1) {
      uint32_t p = (me + 1 + imm_sent) % n;
      int rc = t.post_imm(p, kImmOnly | me, uint64_t{n} * 4096 + p);
      if (rc == -EAGAIN) break;
      if (rc) throw std::runtime_error(where(me, "post_imm failed: " + t.last_error()));
      ++imm_sent;
    }
    size_t nc = 0, ni = 0;
    if (t.poll(c, 64, &nc, im, 64, &ni)) throw std::runtime_error(where(me, "poll failed: " + t.last_error()));
    for (size_t k = 0; k < nc; ++k) {
      if (c[k].status)
        throw std::runtime_error(
            where(me, "completion " + std::to_string(c[k].context) + " failed: " + t.last_error()));
      if (c[k].context >= comp_seen.size() || comp_seen[c[k].context]++)
        throw std::runtime_error(
            where(me, "completion context " + std::to_string(c[k].context) + " unknown or duplicated"));
      ++comps;
    }
    for (size_t k = 0; k < ni; ++k) {
      uint32_t s = im[k].src_rank, v = im[k].imm;
      bool only = v & kImmOnly;
      uint32_t claimed = only ? (v & 0xffff) : v / 4096, j = only ? W : v % 4096;
      if (s >= n || s == me || claimed != s || j > W)
        throw std::runtime_error(where(me, "immediate " + std::to_string(v) + " reported from rank " +
                                               std::to_string(s) + " but it was sent by rank " +
                                               std::to_string(claimed)));
      if (seen[s][j]++)
        throw std::runtime_error(
            where(me, "immediate " + std::to_string(v) + " from rank " + std::to_string(s) + " delivered twice"));
      ++st.imms_received;
      if (only) continue;
      // Data must be complete when its immediate is seen.
      uint64_t len = size_of(spec, s, me, j), off = in_off[s][j];
      for (uint64_t i = 0; i < len; ++i)
        if (dst[off + i] != byte_at(s, me, j, i))
          throw std::runtime_error(where(me, "write " + std::to_string(j) + " from rank " + std::to_string(s) + " (" +
                                                 std::to_string(len) + " B): byte " + std::to_string(i) +
                                                 " wrong when its immediate arrived"));
      st.bytes_received += len;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (uint32_t p = 0; p < n; ++p)
        for (uint32_t j = 0; j <= W && p != me; ++j)
          if (!seen[p][j] && missing.size() < 400)
            missing += " (rank " + std::to_string(p) + ", write " + std::to_string(j) + ")";
      throw std::runtime_error(where(me, "timed out after " + std::to_string(spec.timeout_s) +
                                             " s: " + std::to_string(comps) + "/" + std::to_string(expect_comps) +
                                             " completions, " + std::to_string(st.imms_received) + "/" +
                                             std::to_string(expect_imms) + " immediates; missing" + missing));
    }
  }
  // Nothing outside the written slots may change, and the spare byte at the end stays zero.
  if (dst[in_total] != 0) throw std::runtime_error(where(me, "byte past the last slot was written"));
  b.barrier();
  return st;
}

}  // namespace anyep::mptest
