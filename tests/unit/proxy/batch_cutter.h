// anyep/tests/unit/proxy/batch_cutter.h — a Transport wrapper that cuts post_writes batches short
// with -EAGAIN at seeded random points (and refuses single posts now and then), to drive the
// proxy's batch retry; two faulty modes (a write lost or posted twice in a cut batch) are the
// negative controls that show the tests' checks catch exactly those faults.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "transport/forwarding_transport.h"

namespace anyep::proxy::testing {

enum class Cut { kHonest, kLoseOne, kDuplicateOne };

struct CutStats {
  std::atomic<uint64_t> batches{0}, cut{0}, largest{0}, refused_single{0};
};

// Wraps an endpoint: post_writes posts a seeded random prefix of each batch (half of them cut,
// some at 0) and says -EAGAIN for the rest; post_write / post_imm say -EAGAIN one time in four.
// kLoseOne reports one write more than it posted when it cuts; kDuplicateOne posts one more than
// it reports (the proxy then posts that write again).
class BatchCutter final : public transport::ForwardingTransport {
 public:
  BatchCutter(std::unique_ptr<transport::Transport> in, uint64_t seed, Cut mode, std::shared_ptr<CutStats> stats)
      : ForwardingTransport(std::move(in)), rng_(seed), mode_(mode), stats_(std::move(stats)) {}

  int post_writes(const transport::WriteDesc* w, size_t n, size_t* posted) override {
    *posted = 0;
    stats_->batches.fetch_add(1);
    uint64_t big = stats_->largest.load();
    while (n > big && !stats_->largest.compare_exchange_weak(big, n)) {
    }
    size_t k = n;
    if (n && rng_() % 2) k = rng_() % n;  // cut: 0 .. n-1 go out
    if (k < n) stats_->cut.fetch_add(1);
    size_t sent = 0;
    if (k < n && mode_ == Cut::kDuplicateOne) {
      const int rc = inner_->post_writes(w, k + 1, &sent);  // write k goes, but is not reported
      *posted = std::min(sent, k);
      return rc ? rc : fail();
    }
    if (k < n && k > 0 && mode_ == Cut::kLoseOne) {
      const int rc = inner_->post_writes(w, k - 1, &sent);  // write k-1 is reported, never posted
      *posted = sent + (rc ? 0 : 1);
      return rc ? rc : fail();
    }
    const int rc = inner_->post_writes(w, k, &sent);
    *posted = sent;
    return rc ? rc : (k < n ? fail() : 0);
  }
  int post_write(const transport::WriteDesc& w) override {
    if (rng_() % 4 == 0) return refuse();
    return inner_->post_write(w);
  }
  int post_imm(uint32_t d, uint32_t imm, uint64_t c) override {
    if (rng_() % 4 == 0) return refuse();
    return inner_->post_imm(d, imm, c);
  }
  std::string last_error() const override { return refused_ ? "batch cutter: backpressure" : inner_->last_error(); }

 private:
  int fail() {
    refused_ = true;
    return -EAGAIN;
  }
  int refuse() {
    stats_->refused_single.fetch_add(1);
    return fail();
  }
  std::mt19937_64 rng_;
  Cut mode_;
  std::shared_ptr<CutStats> stats_;
  bool refused_ = false;
};

}  // namespace anyep::proxy::testing
