// Callback bootstrap and connect_all, in one process (threads stand in for ranks).
#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "common/error.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/region_table.h"

namespace anyep::transport {
namespace {

// An in-process allgather for n threads (what torch.distributed would provide).
class ThreadAllgather {
 public:
  explicit ThreadAllgather(uint32_t n) : slots_(n), sync_(n) {}
  AllgatherFn fn(uint32_t rank) {
    return [this, rank](const std::vector<uint8_t>& mine) {
      slots_[rank] = mine;
      sync_.arrive_and_wait();
      auto all = slots_;
      sync_.arrive_and_wait();  // nobody overwrites a slot before everyone copied
      return all;
    };
  }

 private:
  std::vector<std::vector<uint8_t>> slots_;
  std::barrier<> sync_;
};

TEST(CallbackBootstrap, RejectsBadArgumentsAndMalformedResults) {
  EXPECT_THROW(
      make_callback_bootstrap(2, 2, [](const std::vector<uint8_t>&) { return std::vector<std::vector<uint8_t>>{}; }),
      InvalidArgument);
  EXPECT_THROW(make_callback_bootstrap(0, 1, nullptr), InvalidArgument);
  auto short_result =
      make_callback_bootstrap(0, 2, [](const std::vector<uint8_t>& m) { return std::vector<std::vector<uint8_t>>{m}; });
  EXPECT_THROW(short_result->allgather({1}), InvalidArgument);
  auto wrong_slot = make_callback_bootstrap(1, 2, [](const std::vector<uint8_t>& m) {
    return std::vector<std::vector<uint8_t>>{m, {}};
  });
  EXPECT_THROW(wrong_slot->allgather({7}), InvalidArgument);
}

TEST(ConnectAll, LoopbackRanksCanWriteIntoEveryPeerAfterConnectAll) {
  constexpr uint32_t n = 3;
  auto fabric = loopback::make_fabric(n);
  ThreadAllgather ag(n);
  std::vector<std::vector<uint8_t>> mem(n, std::vector<uint8_t>(64, 0));
  std::vector<std::string> errors(n);
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto t = loopback::make_endpoint(fabric, r);
        auto b = make_callback_bootstrap(r, n, ag.fn(r));
        MrId id = t->register_memory(mem[r].data(), mem[r].size(), MemKind::kHost);
        connect_all(*t, *b, {id});
        b->barrier();
        // Each rank writes its byte (r+1) at offset 8*r of every rank's region.
        std::vector<uint8_t> src(8, static_cast<uint8_t>(r + 1));
        MrId sid = t->register_memory(src.data(), src.size(), MemKind::kHost);
        for (uint32_t p = 0; p < n; ++p) {
          WriteDesc w{p, sid, 0, id, 8ull * r, 8, true, r, 0};
          if (t->post_write(w)) throw std::runtime_error(t->last_error());
        }
        b->barrier();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    for (uint32_t s = 0; s < n; ++s)
      for (int i = 0; i < 8; ++i) EXPECT_EQ(mem[r][8 * s + i], s + 1) << "rank " << r << " from " << s;
  }
}

TEST(ConnectAll, MismatchedRegionCountsNameThePeer) {
  constexpr uint32_t n = 2;
  auto fabric = loopback::make_fabric(n);
  ThreadAllgather ag(n);
  std::vector<std::string> errors(n);
  std::vector<uint8_t> a(16), b2(16);
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      try {
        auto t = loopback::make_endpoint(fabric, r);
        auto b = make_callback_bootstrap(r, n, ag.fn(r));
        std::vector<MrId> ids{t->register_memory(a.data(), a.size(), MemKind::kHost)};
        if (r == 1) ids.push_back(t->register_memory(b2.data(), b2.size(), MemKind::kHost));
        connect_all(*t, *b, ids);
      } catch (const InvalidArgument& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  EXPECT_NE(errors[0].find("rank 1 registered 2 regions"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 registered 1 regions"), std::string::npos) << errors[1];
}

// Region ids come from peers: one far out of range is refused with a message, never allocated for
// (before the check, a peer's id of 2^30 resized a vector to a billion entries).
TEST(ConnectAll, PeerSuppliedRegionIdsAreRangeChecked) {
  auto fabric = loopback::make_fabric(2);
  auto a = loopback::make_endpoint(fabric, 0);
  auto b = loopback::make_endpoint(fabric, 1);
  std::vector<uint8_t> mem(64);
  const auto desc = b->export_mr(b->register_memory(mem.data(), mem.size(), MemKind::kHost));
  a->connect({a->local_address(), b->local_address()});
  a->import_mr(1, kMaxRemoteRegions - 1, desc);  // the largest id accepted
  try {
    a->import_mr(1, MrId{1} << 30, desc);
    ADD_FAILURE() << "region id 2^30 from a peer was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("region id 1073741824"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a->import_mr(7, 0, desc), InvalidArgument);
}

}  // namespace
}  // namespace anyep::transport
