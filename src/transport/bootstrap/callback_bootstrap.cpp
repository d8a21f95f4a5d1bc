#include <string>

#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"

namespace anyep::transport {

namespace {
class CallbackBootstrap final : public Bootstrap {
 public:
  CallbackBootstrap(uint32_t rank, uint32_t size, AllgatherFn fn) : rank_(rank), size_(size), fn_(std::move(fn)) {}
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine) override {
    auto all = fn_(mine);
    // The user's collective is outside our control: check its shape before anyone trusts it.
    if (all.size() != size_)
      throw InvalidArgument("callback bootstrap (rank " + std::to_string(rank_) + "): allgather returned " +
                            std::to_string(all.size()) + " entries for " + std::to_string(size_) + " ranks");
    if (all[rank_] != mine)
      throw InvalidArgument("callback bootstrap (rank " + std::to_string(rank_) +
                            "): allgather result does not hold this rank's contribution at index " +
                            std::to_string(rank_));
    return all;
  }

 private:
  uint32_t rank_, size_;
  AllgatherFn fn_;
};
}  // namespace

std::unique_ptr<Bootstrap> make_callback_bootstrap(uint32_t rank, uint32_t size, AllgatherFn fn) {
  if (size == 0 || rank >= size)
    throw InvalidArgument("callback bootstrap: rank " + std::to_string(rank) + " not in [0, " + std::to_string(size) +
                          ")");
  if (!fn) throw InvalidArgument("callback bootstrap: empty allgather function");
  return std::make_unique<CallbackBootstrap>(rank, size, std::move(fn));
}

}  // namespace anyep::transport
