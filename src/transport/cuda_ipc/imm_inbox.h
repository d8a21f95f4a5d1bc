// anyep/src/transport/cuda_ipc/imm_inbox.h — the shared-memory queue that carries immediates
// between processes of one host (layout in cuda_ipc_wire.h). The owner creates its inbox and
// drains it in poll(); each peer attaches to it and pushes into the ring reserved for its rank.
// Plain CPU code: no CUDA here.
#pragma once

#include <cstdint>
#include <string>

#include "transport/cuda_ipc/cuda_ipc_wire.h"
#include "transport/transport.h"

namespace anyep::transport::cuda_ipc {

class ImmInbox {
 public:
  // Creates (and owns: unlinks at destruction) a new segment `name` for num_ranks producers.
  static ImmInbox create(const std::string& name, uint32_t num_ranks, uint32_t slots);
  // Attaches to a peer's segment; checks its header against what the peer's address announced.
  static ImmInbox attach(const std::string& name, uint32_t num_ranks, uint32_t slots);

  ImmInbox() = default;
  ImmInbox(ImmInbox&& o) noexcept { *this = static_cast<ImmInbox&&>(o); }
  ImmInbox& operator=(ImmInbox&& o) noexcept;
  ImmInbox(const ImmInbox&) = delete;
  ImmInbox& operator=(const ImmInbox&) = delete;
  ~ImmInbox() { reset(); }

  bool valid() const { return base_ != nullptr; }
  const std::string& name() const { return name_; }
  uint32_t slots() const { return slots_; }

  // Producer `src`: false when that ring is full (the caller keeps the immediate and retries).
  bool push(uint32_t src, uint32_t imm);
  // Consumer: moves up to max arrivals (all rings, round robin from a rotating start) to out.
  size_t drain(ImmEvent* out, size_t max);

 private:
  void reset();
  RingIndices* indices(uint32_t src) const;
  uint32_t* slot_array(uint32_t src) const;

  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t num_ranks_ = 0;
  uint32_t slots_ = 0;
  uint32_t next_src_ = 0;  // consumer fairness: where the next drain starts
  bool owner_ = false;
  std::string name_;
};

}  // namespace anyep::transport::cuda_ipc
