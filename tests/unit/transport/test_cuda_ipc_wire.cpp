// The cuda-ipc backend's checks of the bytes its peers hand over (cuda_ipc_wire.h: addresses and
// region descriptors): a well-formed record comes back as sent, a malformed one is refused naming
// the rank, the region and what is wrong. Plain CPU code: runs without a GPU and under the
// sanitizers (the GPU test test_cuda_ipc checks the same through a live endpoint).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"

namespace anyep::transport::cuda_ipc {
namespace {

template <class T>
std::vector<uint8_t> bytes_of(const T& v) {
  std::vector<uint8_t> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

WireAddress address(uint32_t rank, uint32_t num_ranks) {
  WireAddress a{};
  a.magic = kAddressMagic;
  a.version = kWireVersion;
  a.rank = rank;
  a.num_ranks = num_ranks;
  a.process_token = 0x1234;
  a.pid = 42;
  a.inbox_slots = 64;
  std::snprintf(a.inbox_name, sizeof a.inbox_name, "/anyep-inbox-%u", rank);
  return a;
}

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

void expect_has(const std::string& m, const std::string& part) {
  EXPECT_NE(m.find(part), std::string::npos) << "'" << m << "' lacks '" << part << "'";
}

TEST(CudaIpcWire, AddressRoundTrip) {
  const WireAddress a = parse_address(bytes_of(address(1, 4)), 1, 4, "ep");
  EXPECT_EQ(a.rank, 1u);
  EXPECT_EQ(a.num_ranks, 4u);
  EXPECT_EQ(a.process_token, 0x1234u);
  EXPECT_STREQ(a.inbox_name, "/anyep-inbox-1");
}

TEST(CudaIpcWire, MalformedAddressesAreRefused) {
  std::vector<uint8_t> b = bytes_of(address(1, 4));
  b.pop_back();
  expect_has(refusal([&] { parse_address(b, 1, 4, "ep"); }), "ep: address of rank 1 has 95 bytes, expected 96");
  expect_has(refusal([&] { parse_address({}, 2, 4, "ep"); }), "address of rank 2 has 0 bytes");
  WireAddress a = address(1, 4);
  a.magic ^= 1;
  expect_has(refusal([&] { parse_address(bytes_of(a), 1, 4, "ep"); }), "is not a cuda-ipc address (magic/version)");
  a = address(1, 4);
  a.version = kWireVersion + 1;
  expect_has(refusal([&] { parse_address(bytes_of(a), 1, 4, "ep"); }), "(magic/version)");
  expect_has(refusal([&] { parse_address(bytes_of(address(2, 4)), 1, 4, "ep"); }),
             "address at index 1 is rank 2 of a 4-rank job");
  expect_has(refusal([&] { parse_address(bytes_of(address(1, 8)), 1, 4, "ep"); }),
             "address at index 1 is rank 1 of a 8-rank job");
}

TEST(CudaIpcWire, InboxNameIsTerminatedWhateverThePeerSent) {
  WireAddress a = address(0, 2);
  std::memset(a.inbox_name, 'x', sizeof a.inbox_name);  // no NUL anywhere
  const WireAddress got = parse_address(bytes_of(a), 0, 2, "ep");
  EXPECT_EQ(std::strlen(got.inbox_name), kShmNameBytes - 1);
}

TEST(CudaIpcWire, RegionDescriptors) {
  WireRegion w{};
  w.magic = kRegionMagic;
  w.version = kWireVersion;
  w.device = kHostRegionDevice;
  w.alloc_base = 0x7000;
  w.offset = 16;
  w.length = 4096;
  const WireRegion got = parse_region(bytes_of(w), 3, 1, "ep");
  EXPECT_EQ(got.length, 4096u);
  EXPECT_EQ(got.device, kHostRegionDevice);
  std::vector<uint8_t> b = bytes_of(w);
  b.resize(b.size() + 1);
  expect_has(refusal([&] { parse_region(b, 3, 1, "ep"); }),
             "ep: region 1 of rank 3: descriptor has 105 bytes, expected 104");
  w.magic = kAddressMagic;  // another record's magic
  expect_has(refusal([&] { parse_region(bytes_of(w), 3, 1, "ep"); }),
             "region 1 of rank 3: not a cuda-ipc region descriptor (magic/version)");
}

}  // namespace
}  // namespace anyep::transport::cuda_ipc
