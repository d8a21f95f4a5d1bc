// anyep/bench/kit/workload.h
//
// A seeded CPU workload shaped like EP traffic, for tests, the CPU main job and benchmarks. On
// every rank, Q producer threads play GPU warps, one ring each; one observer thread plays the
// receiving kernel and owns the last ring (the control ring) for acknowledgements and barriers.
// All traffic between ranks goes through rings -> proxies -> transport, so the workload runs the
// same in one process and across processes.
//
//  LL stream of producer (s, q) to d = dest(s, q): round r writes n_r in [0, max_tokens] tokens
//    (16..token_max bytes) into d's LL area (s, q, parity r&1), tag 2q + parity, then a count
//    signal (fence_count n_r) adds 1 to counter ll(s, q, parity). The observer on d verifies the
//    round's bytes (checksums) as soon as it sees the counter move, then acks with an unfenced
//    signal to counter ll_ack(q) on s. Round r+2 reuses the parity buffer only once round r is
//    acked (LL double buffering).
//  HT stream of producer (s, q) to d: chunk k (1 or 2 writes) goes to slot k % ht_slots of d's HT
//    ring (s, q), tag 2Q + q, then an ordered signal adds 1 to ht_tail(s, q). The observer verifies
//    chunks up to the tail and returns the head with a signal to ht_head(q) on s (ring credits).
//    The ring, the tail signal and the credits are those of kernels/ht/internode_protocol.h, the
//    rules the internode HT kernels follow.
//  Every quiet_every commands a producer pushes QUIET and waits for it; with a peek function
//  (ranks in one process) it then checks the bytes it wrote are already at the destination.
//
// Invariants checked: bytes in place when a signal is observed; every counter ends at exactly the
// number of signals sent (none lost or duplicated) and never runs ahead of what was sent; QUIET
// returns only after earlier writes landed. A violation throws benchkit::DataViolation (an
// anyep::InternalError) naming the stream, round and byte.
//
// Error precedence: a data violation is the error reported, ahead of any timeout it causes (an
// observer that found corrupt bytes stops acking, so producers waiting for acks would time out).
// run() records the threads' errors separately, stops the other threads once one failed, and
// rethrows the first violation if there is one, else the first error; first_by_precedence() does
// the same over ranks that share a process.
//
// Buffer layout of one rank (all sizes multiples of 16):
//   recv[s][q]  = { ll[2][max_tokens][token_max], ht[ht_slots][chunk_max] }   for s < R, q < Q
//   send[q]     = { ll[2][max_tokens][token_max], ht[ht_slots][chunk_max] }   for q < Q
// Counters: ll(s,q,p) = 3(sQ+q)+p, ht_tail(s,q) = 3(sQ+q)+2, ll_ack(q) = 3RQ+2q, ht_head(q) = 3RQ+2q+1.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "channel/channel.h"
#include "common/error.h"

namespace anyep::benchkit {

// Bytes not in place, or a counter that does not match what was sent: the workload's own finding.
struct DataViolation : InternalError {
  explicit DataViolation(const std::string& w) : InternalError(w) {}
};

// Of several errors (one per thread or rank, null where none): the first data violation if any,
// else the first error, else null.
std::exception_ptr first_by_precedence(const std::vector<std::exception_ptr>& errs);

struct WorkloadConfig {
  uint64_t seed = 1;
  uint32_t ranks = 2;
  uint32_t producers = 2;  // per rank; rings per rank = producers + 1
  uint32_t ll_rounds = 50;
  uint32_t ht_chunks = 100;
  uint32_t max_tokens = 8;
  uint32_t token_max = 256;  // bytes, multiple of 16
  uint32_t ht_slots = 8;
  uint32_t chunk_max = 512;  // bytes, multiple of 32 (a chunk may be split in two writes)
  uint32_t quiet_every = 16;
  double timeout_s = 30;
  // Negative control only (tests/mp/proxy/test_tsan_model.cpp): LL producers reuse a parity buffer
  // without waiting for its ack, a real bug that TSan must report.
  bool refill_before_ack = false;
  // Negative control only (tests/unit/proxy/test_proxy_random.cpp, tests/mp/proxy): HT tail
  // signals without the partial-order fence, so on an unordered transport a receiver can see a
  // tail before the chunk's bytes: the workload must report it.
  bool ht_unfenced_tail = false;
};

struct WorkloadResult {
  uint64_t commands = 0;                   // pushed by this rank's producers and observer
  uint64_t payload_bytes = 0;              // WRITE bytes pushed by this rank's producers
  std::vector<uint64_t> ll_round_trip_ns;  // count signal pushed -> ack observed back
  std::vector<uint64_t> quiet_ns;          // QUIET pushed -> retired
};

class StreamWorkload {
 public:
  // `peek(r)` returns rank r's buffer when ranks share this process, else nullptr.
  StreamWorkload(const WorkloadConfig& cfg, uint32_t rank, uint8_t* buffer, uint64_t* counters,
                 channel::Channel& channel, std::function<const uint8_t*(uint32_t)> peek = {});

  static uint64_t buffer_bytes(const WorkloadConfig& c);
  static uint32_t num_counters(const WorkloadConfig& c);
  static uint32_t num_rings(const WorkloadConfig& c) { return c.producers + 1; }
  static uint32_t num_tags(const WorkloadConfig& c) { return 3 * c.producers; }
  static uint32_t dest(const WorkloadConfig& c, uint32_t src, uint32_t q);

  // Runs producers and the observer to completion, then a barrier and the final counter checks.
  // `on_error()` is polled while waiting (e.g. Proxy::check) so a proxy failure ends the run.
  WorkloadResult run(const std::function<void()>& on_error);
  // BARRIER on the control ring (every rank must call it the same number of times).
  void barrier(uint64_t epoch, bool rail = false);

 private:
  struct Geometry;
  void producer(uint32_t q, WorkloadResult& res);
  void observer(WorkloadResult& res);
  void wait_counter(uint32_t idx, uint64_t want, const char* what, uint32_t q);
  void push(const channel::RingHandle& h, const channel::TransferCmd& c, const char* what);
  [[noreturn]] void violation(const std::string& msg) const;

  WorkloadConfig cfg_;
  uint32_t rank_;
  uint8_t* buf_;
  uint64_t* counters_;
  channel::Channel& ch_;
  std::function<const uint8_t*(uint32_t)> peek_;
  std::function<void()> on_error_;
  std::atomic<bool> stop_{false};  // a thread of this run failed: the others stop waiting
};

}  // namespace anyep::benchkit
