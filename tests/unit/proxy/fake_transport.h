// A Transport that only records: registrations (with their memory), writes and immediates posted,
// and answers posts with scripted return codes. For driving the proxy's parts (signal link,
// barrier tracker) without a peer.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace anyep::proxy::testing {

struct PostedImm {
  uint32_t dst;
  uint32_t imm;
  uint64_t context;
};

class FakeTransport : public transport::Transport {
 public:
  FakeTransport(uint32_t rank, uint32_t num_ranks) : rank_(rank), num_ranks_(num_ranks) {
    caps_.backend = caps_.provider = "fake";
  }

  const transport::Capabilities& capabilities() const override { return caps_; }
  uint32_t rank() const override { return rank_; }
  uint32_t num_ranks() const override { return num_ranks_; }
  transport::MrId register_memory(void* base, size_t length, transport::MemKind) override {
    mrs.push_back({static_cast<uint8_t*>(base), length});
    return static_cast<transport::MrId>(mrs.size() - 1);
  }
  std::vector<uint8_t> export_mr(transport::MrId) const override { return {}; }
  std::vector<uint8_t> local_address() const override { return {}; }
  void connect(const std::vector<std::vector<uint8_t>>&) override {}
  void import_mr(uint32_t, transport::MrId, const std::vector<uint8_t>&) override {}

  int post_write(const transport::WriteDesc& w) override {
    if (const int rc = next_rc()) return rc;
    writes.push_back(w);
    return 0;
  }
  int post_imm(uint32_t dst, uint32_t imm, uint64_t context) override {
    if (const int rc = next_rc()) return rc;
    imms.push_back({dst, imm, context});
    return 0;
  }
  int poll(transport::Completion*, size_t, size_t* nc, transport::ImmEvent*, size_t, size_t* ni) override {
    *nc = *ni = 0;
    return 0;
  }
  std::string last_error() const override { return "fake failure"; }

  // The bytes of a write's source range (local registered memory).
  const uint8_t* source(const transport::WriteDesc& w) const { return mrs[w.local_mr].base + w.local_offset; }

  struct Mr {
    uint8_t* base;
    size_t length;
  };
  std::vector<Mr> mrs;
  std::vector<transport::WriteDesc> writes;  // posted successfully, in order
  std::vector<PostedImm> imms;
  std::deque<int> fail;  // return codes for the next posts (0: post it)

 private:
  int next_rc() {
    if (fail.empty()) return 0;
    const int rc = fail.front();
    fail.pop_front();
    return rc;
  }
  uint32_t rank_, num_ranks_;
  transport::Capabilities caps_;
};

}  // namespace anyep::proxy::testing
