// anyep/src/transport/forwarding_transport.h — a Transport that passes every call to an inner
// one: the base of wrappers that change a few calls (the chaos transport, test doubles) and must
// pass the rest through unchanged. post_writes is deliberately not forwarded: the default loop
// calls this object's post_write, so a wrapper that checks or reorders single writes sees every
// write of a batch too (a wrapper may forward batches itself).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace anyep::transport {

class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  const Capabilities& capabilities() const override { return inner_->capabilities(); }
  uint32_t rank() const override { return inner_->rank(); }
  uint32_t num_ranks() const override { return inner_->num_ranks(); }
  MrId register_memory(void* base, size_t length, MemKind kind) override {
    return inner_->register_memory(base, length, kind);
  }
  std::vector<uint8_t> export_mr(MrId id) const override { return inner_->export_mr(id); }
  std::vector<uint8_t> local_address() const override { return inner_->local_address(); }
  void connect(const std::vector<std::vector<uint8_t>>& addresses) override { inner_->connect(addresses); }
  void import_mr(uint32_t peer, MrId remote_id, const std::vector<uint8_t>& desc) override {
    inner_->import_mr(peer, remote_id, desc);
  }
  int post_write(const WriteDesc& w) override { return inner_->post_write(w); }
  int post_atomic_add(const AtomicAddDesc& a) override { return inner_->post_atomic_add(a); }
  int post_imm(uint32_t dst_rank, uint32_t imm, uint64_t context) override {
    return inner_->post_imm(dst_rank, imm, context);
  }
  int poll(Completion* comps, size_t max_comps, size_t* n_comps, ImmEvent* imms, size_t max_imms,
           size_t* n_imms) override {
    return inner_->poll(comps, max_comps, n_comps, imms, max_imms, n_imms);
  }
  std::string last_error() const override { return inner_->last_error(); }

 protected:
  std::unique_ptr<Transport> inner_;
};

}  // namespace anyep::transport
