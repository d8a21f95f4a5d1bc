#include "bench/kit/inproc_bootstrap.h"

#include <chrono>

#include "common/error.h"

namespace anyep::benchkit {

namespace {
class Member final : public transport::Bootstrap {
 public:
  Member(InProcessGroup* g, uint32_t rank) : g_(g), rank_(rank) {}
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return g_->size(); }
  std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine) override {
    return g_->allgather(rank_, mine);
  }

 private:
  InProcessGroup* g_;
  uint32_t rank_;
};
}  // namespace

std::unique_ptr<transport::Bootstrap> InProcessGroup::member(uint32_t rank) {
  if (rank >= size_)
    throw InvalidArgument("in-process bootstrap: rank " + std::to_string(rank) + " of " + std::to_string(size_));
  return std::make_unique<Member>(this, rank);
}

std::vector<std::vector<uint8_t>> InProcessGroup::allgather(uint32_t rank, const std::vector<uint8_t>& mine) {
  std::unique_lock<std::mutex> lk(mu_);
  if (present_.empty()) present_.assign(size_, false);
  const uint64_t gen = generation_;
  in_[rank] = mine;
  present_[rank] = true;
  if (++arrived_ == size_) {
    out_ = in_;
    arrived_ = 0;
    present_.assign(size_, false);
    ++generation_;
    cv_.notify_all();
    return out_;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  if (!cv_.wait_until(lk, deadline, [&] { return generation_ != gen; })) {
    std::string missing;
    // Appended piecewise: `"," + std::to_string(r)` trips GCC 12's -Wrestrict false positive at -O3.
    for (uint32_t r = 0; r < size_; ++r) {
      if (present_[r]) continue;
      if (!missing.empty()) missing += ',';
      missing += std::to_string(r);
    }
    throw TimeoutError("in-process bootstrap: rank " + std::to_string(rank) + " waited " + std::to_string(timeout_s_) +
                       " s in allgather; ranks never arrived: " + missing);
  }
  return out_;
}

}  // namespace anyep::benchkit
