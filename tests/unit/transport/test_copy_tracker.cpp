// The cuda-ipc endpoint's bookkeeping (src/transport/cuda_ipc/copy_tracker.h) on the CPU, with fake
// events: a copy's immediate goes only after the event behind it fired, a batch cut by an issue
// error completes its unissued copies failed (no immediate), a failed event fails exactly its
// copies, immediates wait in order for inbox room, and under a seeded random schedule of all of
// it (against a model) every operation completes exactly once and no immediate overtakes its data.
#include "transport/cuda_ipc/copy_tracker.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <random>
#include <set>
#include <vector>

using namespace anyep::transport;
using namespace anyep::transport::cuda_ipc;

namespace {

using Tracker = CopyTracker<int>;  // events are ints: the fake "GPU" says which fired

struct FakeGpu {
  std::map<int, int> state;  // event -> 0 pending, 1 fired, <0 failed
  std::vector<int> released;
  int next = 1;
  int record() {
    state[next] = 0;
    return next++;
  }
  auto query() {
    return [this](int e) { return state.at(e); };
  }
  auto release() {
    return [this](int e) { released.push_back(e); };
  }
};

struct FakeInbox {
  std::vector<std::pair<uint32_t, uint32_t>> got;  // (peer, imm) in delivery order
  size_t room = SIZE_MAX;
  auto push() {
    return [this](uint32_t peer, uint32_t imm) {
      if (!room) return false;
      --room;
      got.push_back({peer, imm});
      return true;
    };
  }
};

CopyOp op(uint64_t ctx, uint32_t dst, bool imm = true) { return {ctx, dst, static_cast<uint32_t>(ctx * 10), imm}; }

std::vector<Completion> take_all(Tracker& t) {
  std::vector<Completion> v;
  Completion c;
  while (t.take(&c)) v.push_back(c);
  return v;
}

}  // namespace

TEST(CopyTracker, ImmediatesGoOnlyAfterTheEventBehindTheirCopyFired) {
  Tracker t(2, 2, 16);
  FakeGpu gpu;
  FakeInbox inbox;
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t.queue(nullptr, nullptr, 64, op(i, 1)));
  EXPECT_EQ(t.queued().size(), 3u);
  t.commit_issue(0, 3, -EIO);
  EXPECT_TRUE(t.queued().empty());
  ASSERT_TRUE(t.needs_fence(0));
  const int e0 = gpu.record();
  t.fenced(0, e0);
  EXPECT_FALSE(t.needs_fence(0));
  EXPECT_EQ(t.fences_in_flight(), 1u);
  t.reap(gpu.query(), gpu.release(), inbox.push());
  EXPECT_TRUE(inbox.got.empty()) << "the event has not fired";
  EXPECT_TRUE(take_all(t).empty());
  gpu.state[e0] = 1;
  t.reap(gpu.query(), gpu.release(), inbox.push());
  ASSERT_EQ(inbox.got.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(inbox.got[i], std::make_pair(1u, i * 10));
  const auto c = take_all(t);
  ASSERT_EQ(c.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].context, i);
    EXPECT_EQ(c[i].status, 0);
  }
  EXPECT_EQ(gpu.released, std::vector<int>{e0});
  EXPECT_EQ(t.fences_in_flight(), 0u);
  EXPECT_EQ(t.undelivered(), 0u);
}

TEST(CopyTracker, ABatchCutByAnIssueErrorFailsOnlyTheUnissuedCopies) {
  Tracker t(1, 2, 16);
  FakeGpu gpu;
  FakeInbox inbox;
  for (uint64_t i = 0; i < 5; ++i) t.queue(nullptr, nullptr, 64, op(i, 1));
  t.commit_issue(0, 2, -EIO);  // copies 0 and 1 went; 2..4 never did
  auto c = take_all(t);
  ASSERT_EQ(c.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].context, 2 + i);
    EXPECT_EQ(c[i].status, -EIO);
  }
  t.fenced(0, gpu.record());
  gpu.state[1] = 1;
  t.reap(gpu.query(), gpu.release(), inbox.push());
  ASSERT_EQ(inbox.got.size(), 2u) << "no immediate for a copy that never went";
  c = take_all(t);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].context, 0u);
  EXPECT_EQ(c[1].context, 1u);
}

TEST(CopyTracker, AFailedEventFailsExactlyItsCopiesAndLaterEventsStillComplete) {
  Tracker t(1, 2, 16);
  FakeGpu gpu;
  FakeInbox inbox;
  t.queue(nullptr, nullptr, 64, op(0, 1));
  t.queue(nullptr, nullptr, 64, op(1, 1));
  t.commit_issue(0, 2, -EIO);
  const int a = gpu.record();
  t.fenced(0, a);
  t.queue(nullptr, nullptr, 64, op(2, 1));
  t.commit_issue(0, 1, -EIO);
  const int b = gpu.record();
  t.fenced(0, b);
  gpu.state[a] = -EIO;
  gpu.state[b] = 1;
  t.reap(gpu.query(), gpu.release(), inbox.push());
  const auto c = take_all(t);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, -EIO);
  EXPECT_EQ(c[1].status, -EIO);
  EXPECT_EQ(c[2].context, 2u);
  EXPECT_EQ(c[2].status, 0);
  ASSERT_EQ(inbox.got.size(), 1u);
  EXPECT_EQ(inbox.got[0].second, 20u);
  EXPECT_EQ(gpu.released, (std::vector<int>{a, b}));
}

TEST(CopyTracker, UnfencedCopiesFailWhenNoEventCanBeRecorded) {
  Tracker t(2, 2, 16);
  FakeGpu gpu;
  FakeInbox inbox;
  t.queue(nullptr, nullptr, 64, op(0, 1));
  t.commit_issue(1, 1, -EIO);
  t.fenced(1, gpu.record());
  t.queue(nullptr, nullptr, 64, op(1, 1));
  t.queue(nullptr, nullptr, 64, op(2, 1));
  t.commit_issue(1, 2, -EIO);
  t.fail_unfenced(1, -EIO);  // ops 1 and 2 had no event
  auto c = take_all(t);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, -EIO);
  EXPECT_EQ(c[1].status, -EIO);
  gpu.state[1] = 1;
  t.reap(gpu.query(), gpu.release(), inbox.push());
  c = take_all(t);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].context, 0u);
  EXPECT_EQ(c[0].status, 0);
}

TEST(CopyTracker, ImmediatesWaitInOrderForInboxRoom) {
  Tracker t(1, 3, 16);
  FakeInbox inbox;
  inbox.room = 2;
  for (uint64_t i = 0; i < 5; ++i) t.in_place(op(i, 2), inbox.push());  // empty writes, bare immediates
  t.in_place(op(9, 1, /*imm=*/false), inbox.push());                    // no immediate: done at once
  EXPECT_EQ(inbox.got.size(), 2u);
  auto c = take_all(t);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].context, 9u);
  EXPECT_EQ(t.undelivered(), 3u);
  inbox.room = 10;
  t.flush_all_imms(inbox.push());
  ASSERT_EQ(inbox.got.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(inbox.got[i].second, i * 10) << "in posting order";
  EXPECT_EQ(take_all(t).size(), 3u);
  EXPECT_EQ(t.undelivered(), 0u);
}

TEST(CopyTracker, TheQueueIsBounded) {
  Tracker t(1, 1, 2);
  EXPECT_TRUE(t.queue(nullptr, nullptr, 1, op(0, 0)));
  EXPECT_TRUE(t.queue(nullptr, nullptr, 1, op(1, 0)));
  EXPECT_FALSE(t.queue(nullptr, nullptr, 1, op(2, 0)));
}

// Random schedules of queue / issue (cut at random, sometimes by an error) / fence / event fires
// or fails / inbox room / reap: every op completes exactly once; an op with status 0 sent its
// immediate, after its copy's event fired; failed ops sent none.
TEST(CopyTracker, RandomSchedulesCompleteEveryOperationExactlyOnce) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    const uint32_t streams = 1 + rng() % 3, peers = 1 + rng() % 3;
    Tracker t(streams, peers, 64);
    FakeGpu gpu;
    FakeInbox inbox;
    inbox.room = 0;
    std::map<int, std::vector<uint64_t>> behind;  // event -> the ops it covers
    std::vector<std::vector<uint64_t>> unfenced(streams);
    std::map<uint64_t, int> fired_ok;  // op -> 1 when its event fired
    std::map<uint64_t, int> completions;
    std::set<uint64_t> failed, sent_imm;
    uint64_t next = 0;
    auto push = [&](uint32_t peer, uint32_t imm) {
      if (!inbox.push()(peer, imm)) return false;
      const uint64_t id = imm / 10;
      EXPECT_TRUE(fired_ok.count(id)) << "seed " << seed << ": immediate of op " << id << " before its data";
      EXPECT_TRUE(sent_imm.insert(id).second) << "seed " << seed << ": immediate of op " << id << " twice";
      return true;
    };
    auto drain = [&] {
      Completion c;
      while (t.take(&c)) {
        ++completions[c.context];
        if (c.status) failed.insert(c.context);
      }
    };
    for (int step = 0; step < 400; ++step) {
      switch (rng() % 6) {
        case 0:
          for (int k = rng() % 8; k > 0 && t.queued().size() < 64; --k) t.queue(nullptr, nullptr, 1, op(next++, 0));
          break;
        case 1: {  // issue: a prefix goes (the rest fails) to a random stream
          const uint32_t s = rng() % streams;
          const size_t n = t.queued().size(), issued = rng() % 4 ? n : rng() % (n + 1);
          for (size_t i = 0; i < issued; ++i) unfenced[s].push_back(t.queued()[i].op.context);
          t.commit_issue(s, issued, -EIO);
          break;
        }
        case 2: {  // fence (or fail to)
          const uint32_t s = rng() % streams;
          if (!t.needs_fence(s)) break;
          if (rng() % 10 == 0) {
            t.fail_unfenced(s, -EIO);
          } else {
            const int e = gpu.record();
            t.fenced(s, e);
            behind[e] = unfenced[s];
          }
          unfenced[s].clear();
          break;
        }
        case 3:  // some pending event fires (rarely fails)
          for (auto& [e, st] : gpu.state)
            if (st == 0 && rng() % 2) {
              st = rng() % 15 == 0 ? -EIO : 1;
              if (st == 1)
                for (uint64_t id : behind[e]) fired_ok[id] = 1;
            }
          break;
        case 4:
          inbox.room += rng() % 5;
          t.flush_all_imms(push);
          break;
        default:
          t.reap(gpu.query(), gpu.release(), push);
          break;
      }
      drain();
    }
    // Finish: issue and fence everything, fire every event, room for every immediate.
    for (uint32_t s = 0; s < streams; ++s) {
      if (s == 0) {
        for (const QueuedCopy& q : t.queued()) unfenced[0].push_back(q.op.context);
        t.commit_issue(0, t.queued().size(), -EIO);
      }
      if (t.needs_fence(s)) {
        const int e = gpu.record();
        t.fenced(s, e);
        behind[e] = unfenced[s];
      }
    }
    for (auto& [e, st] : gpu.state)
      if (st == 0) {
        st = 1;
        for (uint64_t id : behind[e]) fired_ok[id] = 1;
      }
    inbox.room = SIZE_MAX;
    t.reap(gpu.query(), gpu.release(), push);
    t.flush_all_imms(push);
    drain();
    EXPECT_EQ(t.undelivered(), 0u) << "seed " << seed;
    EXPECT_EQ(t.fences_in_flight(), 0u) << "seed " << seed;
    for (uint64_t id = 0; id < next; ++id) {
      ASSERT_EQ(completions[id], 1) << "seed " << seed << ": op " << id;
      EXPECT_EQ(sent_imm.count(id), failed.count(id) ? 0u : 1u) << "seed " << seed << ": op " << id;
    }
    EXPECT_EQ(gpu.released.size(), gpu.state.size()) << "seed " << seed << ": every event released once";
  }
}
