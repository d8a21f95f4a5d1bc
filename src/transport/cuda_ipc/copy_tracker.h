// anyep/src/transport/cuda_ipc/copy_tracker.h — the cuda-ipc endpoint's bookkeeping of posted
// operations, without CUDA (the event type is a parameter; test_copy_tracker drives it with fake
// events on the CPU). An operation goes
//   queued (post_writes accepted a GPU copy)  -> issued on a stream (commit_issue)
//   -> behind an event (fence)                -> its data is in place (reap: the event fired)
//   -> its immediate waits for room in the peer's inbox (flush_imms) -> a completion (take).
// Operations with nothing to copy (empty writes, synchronous host writes, bare immediates) enter
// at "data in place". A copy that could not be issued, or whose event failed, completes with an
// error status and never sends its immediate (its data may not be there). Every operation
// completes exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "transport/transport.h"

namespace anyep::transport::cuda_ipc {

// A posted operation: its completion context and the immediate to send once its data landed.
struct CopyOp {
  uint64_t context;
  uint32_t dst;
  uint32_t imm;
  bool has_imm;
};

// A GPU copy accepted by post_writes and not yet handed to the runtime.
struct QueuedCopy {
  void* dst;
  void* src;  // non-const: the CUDA 12.8 batch call takes void**
  size_t bytes;
  CopyOp op;
};

template <class Event>
class CopyTracker {
 public:
  // `max_queued` bounds the queue (the endpoint's max_outstanding); reserved here, so queueing
  // never allocates.
  CopyTracker(uint32_t num_streams, uint32_t num_peers, size_t max_queued)
      : streams_(num_streams), imms_(num_peers), max_queued_(max_queued) {
    queued_.reserve(max_queued);
  }

  // ---- queue ----
  // The caller bounds what is outstanding (max_outstanding); false only if that bound was broken.
  bool queue(void* dst, void* src, size_t bytes, const CopyOp& op) {
    if (queued_.size() >= max_queued_) return false;
    queued_.push_back({dst, src, bytes, op});
    return true;
  }
  const std::vector<QueuedCopy>& queued() const { return queued_; }

  // The first `issued` queued copies went to stream `s`, in queue order; the others could not be
  // issued and complete with `status` (a negative errno). Empties the queue.
  void commit_issue(uint32_t s, size_t issued, int status) {
    Stream& st = streams_[s];
    for (size_t i = 0; i < queued_.size(); ++i) {
      if (i < issued)
        st.ops.push_back(queued_[i].op);
      else
        done_.push_back({queued_[i].op.context, status});
    }
    st.unfenced += issued;
    queued_.clear();
  }

  // ---- fences ----
  bool needs_fence(uint32_t s) const { return streams_[s].unfenced != 0; }
  // `e` was recorded on stream s behind every copy issued there since the last fence.
  void fenced(uint32_t s, Event e) {
    Stream& st = streams_[s];
    st.fences.push_back({e, st.unfenced});
    st.unfenced = 0;
    ++fences_in_flight_;
  }
  // No event could be recorded: the stream's unfenced copies complete with `status` (the caller
  // waited for the stream first, so nothing still reads their sources).
  void fail_unfenced(uint32_t s, int status) {
    Stream& st = streams_[s];
    for (; st.unfenced; --st.unfenced) {
      done_.push_back({st.ops.back().context, status});
      st.ops.pop_back();
    }
  }
  size_t fences_in_flight() const { return fences_in_flight_; }

  // For each stream, oldest event first: query(e) returns 1 (fired), 0 (not yet: stop this
  // stream) or a negative errno (failed: its copies complete with it). Each event that fired or
  // failed is handed to release(e) once. `push(dst, imm)` delivers an immediate (false: the
  // peer's inbox is full, try again at the next flush).
  template <class Query, class Release, class Push>
  void reap(Query&& query, Release&& release, Push&& push) {
    for (Stream& st : streams_) {
      while (!st.fences.empty()) {
        const Fence f = st.fences.front();
        const int q = query(f.event);
        if (q == 0) break;
        for (size_t i = 0; i < f.n_ops; ++i) {
          const CopyOp op = st.ops.front();
          st.ops.pop_front();
          if (q < 0)
            done_.push_back({op.context, q});  // no immediate: the data may not be there
          else
            in_place(op, push);
        }
        st.fences.pop_front();
        --fences_in_flight_;
        release(f.event);
      }
    }
  }

  // ---- immediates and completions ----
  // The op's data is in place: its immediate may go, after the earlier ones to the same peer.
  template <class Push>
  void in_place(const CopyOp& op, Push&& push) {
    if (!op.has_imm) {
      done_.push_back({op.context, 0});
      return;
    }
    imms_[op.dst].push_back(op);
    flush_imms(op.dst, push);
  }
  // Delivers the peer's waiting immediates in order while its inbox has room.
  template <class Push>
  void flush_imms(uint32_t peer, Push&& push) {
    auto& q = imms_[peer];
    while (!q.empty() && push(peer, q.front().imm)) {
      done_.push_back({q.front().context, 0});
      q.pop_front();
    }
  }
  template <class Push>
  void flush_all_imms(Push&& push) {
    for (uint32_t p = 0; p < imms_.size(); ++p) flush_imms(p, push);
  }
  bool take(Completion* c) {
    if (done_.empty()) return false;
    *c = done_.front();
    done_.pop_front();
    return true;
  }

  // Teardown: the events still in flight (to wait for and destroy), and how many operations were
  // never completed.
  template <class Fn>
  void for_each_event(Fn&& fn) const {
    for (const Stream& st : streams_)
      for (const Fence& f : st.fences) fn(f.event);
  }
  size_t undelivered() const {
    size_t n = queued_.size();
    for (const auto& q : imms_) n += q.size();
    for (const Stream& st : streams_) n += st.ops.size();
    return n;
  }

 private:
  struct Fence {
    Event event;
    size_t n_ops;  // the last n_ops copies issued on the stream before it was recorded
  };
  struct Stream {
    std::deque<CopyOp> ops;  // issued, oldest first
    std::deque<Fence> fences;
    size_t unfenced = 0;  // ops at the back of `ops` not yet behind an event
  };
  std::vector<Stream> streams_;
  std::vector<std::deque<CopyOp>> imms_;  // per peer: data in place, immediate waiting for room
  std::vector<QueuedCopy> queued_;
  std::deque<Completion> done_;
  size_t max_queued_;
  size_t fences_in_flight_ = 0;
};

}  // namespace anyep::transport::cuda_ipc
