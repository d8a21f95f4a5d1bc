// The C API's group: collective creation (bootstrap, configuration agreement, LL buffers),
// collective destruction, the asynchronous-error query, the dispatch output shapes.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "anyep/anyep.h"
#include "capi/api_guard.h"
#include "capi/group_record.h"
#include "capi/objects.h"
#include "common/env.h"
#include "common/error.h"
#include "common/host_identity.h"
#include "runtime/ht/topology.h"
#include "runtime/ll/validate.h"

namespace anyep::capi {
namespace {

// An allgather of variable-size contributions over the caller's fixed-size callback: sizes
// first, then every contribution padded to the largest.
std::unique_ptr<transport::Bootstrap> callback_bootstrap(const GroupSpec& s) {
  const anyep_allgather_fn fn = s.allgather;
  void* user = s.allgather_user;
  const uint32_t n = static_cast<uint32_t>(s.num_ranks);
  auto call = [fn, user](const void* send, void* recv, size_t bytes) {
    if (const int rc = fn(send, recv, bytes, user); rc != 0)
      throw TransportError("the allgather callback (cfg->bootstrap.allgather) returned " + std::to_string(rc));
  };
  return transport::make_callback_bootstrap(
      static_cast<uint32_t>(s.rank), n, [call, n](const std::vector<uint8_t>& mine) {
        const uint64_t size = mine.size();
        std::vector<uint64_t> sizes(n);
        call(&size, sizes.data(), sizeof size);
        const uint64_t most = *std::max_element(sizes.begin(), sizes.end());
        constexpr uint64_t kMaxContribution = uint64_t{1} << 30;
        if (most > kMaxContribution)
          throw TransportError("the allgather callback returned a contribution size of " + std::to_string(most) +
                               " bytes (a callback that does not gather by rank?)");
        std::vector<std::vector<uint8_t>> all(n);
        if (most == 0) return all;
        std::vector<uint8_t> send(most), recv(most * n);
        std::memcpy(send.data(), mine.data(), mine.size());
        call(send.data(), recv.data(), most);
        for (uint32_t r = 0; r < n; ++r) all[r].assign(recv.data() + r * most, recv.data() + r * most + sizes[r]);
        return all;
      });
}

std::unique_ptr<transport::Bootstrap> make_bootstrap(const GroupSpec& s) {
  if (s.bootstrap == ANYEP_BOOTSTRAP_ALLGATHER) return callback_bootstrap(s);
  transport::TcpBootstrapOptions o;
  o.timeout_s = s.timeout_s;
  o.secret = env::get_secret("ANYEP_BOOTSTRAP_SECRET");
  o.listen_fd = s.tcp_listen_fd;
  return transport::make_tcp_bootstrap(s.tcp_host, s.tcp_port, static_cast<uint32_t>(s.rank),
                                       static_cast<uint32_t>(s.num_ranks), o);
}

// The ranks of one node (hosts, or ANYEP_HT_RANKS_PER_NODE), the same on every rank: all of them
// on one node run the intranode kernels, several nodes the internode path (docs/ht.md).
int ht_ranks_per_node(const GroupSpec& s, transport::Bootstrap& boot) {
  std::vector<std::string> ids;
  const std::string me = host_identity();
  for (const auto& b : boot.allgather(std::vector<uint8_t>(me.begin(), me.end()))) ids.emplace_back(b.begin(), b.end());
  const int k = runtime::ht_ranks_per_node(ids, static_cast<int>(env::get_count("ANYEP_HT_RANKS_PER_NODE")));
  if (k > ht::kMaxRanks)
    throw Unsupported("the " + std::to_string(s.num_ranks) + " ranks form " + std::to_string(s.num_ranks / k) +
                      " node(s) of " + std::to_string(k) + ": high-throughput mode reaches at most " +
                      std::to_string(ht::kMaxRanks) + " ranks of a node by direct stores");
  return k;
}

std::shared_ptr<Group> create(const anyep_config_t* cfg) {
  auto g = std::make_shared<Group>();
  g->spec = read_config(cfg);
  const GroupSpec& s = g->spec;
  if (s.gpu()) {
    // Before the bootstrap: on a machine without a GPU every rank fails at once, none waits.
    std::string why;
    const int n = device_count(&why);
    if (n == 0) throw Unsupported(why + " (cfg->device = ANYEP_DEVICE_NONE creates a GPU-free group)");
    g->device = resolve_device(s.device);
    if (g->device >= n)
      throw InvalidArgument("cfg->device is " + std::to_string(g->device) + ", but this process sees " +
                            std::to_string(n) + " CUDA device(s)");
  }
  g->boot = make_bootstrap(s);
  const GroupRecord mine = make_record(s);
  check_records(mine, g->boot->allgather(to_bytes(mine)));
  if (s.has_ht()) {
    g->ht_ranks = ht_ranks_per_node(s, *g->boot);
    // The HT buffer serves the node's ranks: its default size is theirs.
    if (s.ht_bytes_auto) g->spec.ht_bytes = ht_default_bytes(s.hidden, g->ht_ranks);
  }
  if (s.gpu() && s.has_ll()) g->ll = make_ll_backend(s, g->device, *g->boot);
  if (s.gpu() && s.has_ht())
    g->ht = g->ht_ranks == s.num_ranks ? make_ht_backend(s, g->device, *g->boot)
                                       : make_ht_internode_backend(s, g->ht_ranks, g->device, *g->boot);
  return g;
}

}  // namespace

runtime::LLBufferInfo Group::info(int device_of_call) const {
  if (ll) return ll->info();
  runtime::LLBufferInfo i;
  i.num_ranks = spec.num_ranks;
  i.device = device_of_call;
  i.num_bytes = spec.ll_bytes;
  return i;
}

void Group::expect_live() const {
  if (destroyed) throw InvalidArgument("the handle's group was destroyed");
}

void Group::expect_mode(anyep_mode_t mode) const {
  const bool ok = mode == ANYEP_MODE_LL ? spec.has_ll() : spec.has_ht();
  if (!ok)
    throw InvalidArgument(std::string("this is a ") +
                          (mode == ANYEP_MODE_LL ? "low-latency (LL)" : "high-throughput (HT)") +
                          " call, but the group was created with cfg->mode = " + mode_name(spec.mode) + " (use " +
                          mode_name(mode) + " or ANYEP_MODE_BOTH)");
}

Registry<Group>& groups() {
  static Registry<Group>* r = new Registry<Group>("anyep group");  // never destroyed: usable at exit
  return *r;
}

}  // namespace anyep::capi

using namespace anyep;
using namespace anyep::capi;

extern "C" anyep_status_t anyep_group_create(const anyep_config_t* cfg, anyep_group_t* group) {
  return guarded("anyep_group_create", [&] {
    require(group, "group");
    *group = nullptr;
    require(cfg, "cfg");
    *group = as_opaque<anyep_group>(groups().add(create(cfg)));
  });
}

extern "C" anyep_status_t anyep_group_destroy(anyep_group_t group) {
  return guarded("anyep_group_destroy", [&] {
    require(group, "group");
    std::shared_ptr<Group> g = groups().take(id_of(group));
    g->destroyed = true;
    // Every rank's kernels finish, then everyone arrives before anyone frees: no peer still
    // writes into this rank's buffer. The buffer is freed even when a step fails; the first
    // failure is reported after.
    std::exception_ptr first_error;
    try {
      if (g->ll) g->ll->synchronize();
      if (g->ht) g->ht->synchronize();
    } catch (...) {
      first_error = std::current_exception();
    }
    try {
      g->boot->barrier();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
    try {
      if (g->ll) g->ll->destroy();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
    try {
      if (g->ht) g->ht->destroy();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
    g->ll.reset();
    g->ht.reset();
    g->boot.reset();
    if (first_error) std::rethrow_exception(first_error);
  });
}

extern "C" anyep_status_t anyep_group_get_async_error(anyep_group_t group, anyep_status_t* async_error) {
  return guarded("anyep_group_get_async_error", [&] {
    require(group, "group");
    require(async_error, "async_error");
    *async_error = ANYEP_SUCCESS;
    std::shared_ptr<Group> g = groups().get(id_of(group));
    try {
      if (g->ll) g->ll->check_async();
      if (g->ht) g->ht->check_async();
    } catch (const Error& e) {
      *async_error = fail("asynchronous error", e.status(), e.what());
    }
  });
}

extern "C" anyep_status_t anyep_get_dispatch_outputs(anyep_group_t group, anyep_tensor_t* recv_x,
                                                     anyep_tensor_t* recv_scales, anyep_tensor_t* recv_count) {
  return guarded("anyep_get_dispatch_outputs", [&] {
    require(group, "group");
    std::shared_ptr<Group> g = groups().get(id_of(group));
    g->expect_mode(ANYEP_MODE_LL);
    const GroupSpec& s = g->spec;
    // The runtime's plan for any token count: a descriptor of one token stands in for x. A
    // GPU-free group describes its outputs on device 0.
    runtime::LLDispatchIn in;
    const int dev = g->device == ANYEP_DEVICE_NONE ? 0 : g->device;
    static const int64_t one = 0;
    in.x = runtime::contiguous_ref(const_cast<int64_t*>(&one), runtime::DType::kBFloat16, {1, s.hidden}, dev);
    in.topk_idx = runtime::contiguous_ref(const_cast<int64_t*>(&one), runtime::DType::kInt64, {1, 1}, dev);
    in.max_tokens = s.max_tokens;
    in.num_experts = s.num_experts;
    in.use_fp8 = s.fp8();
    in.round_scale = s.round_scale;
    in.use_ue8m0 = s.ue8m0;
    const runtime::LLDispatchPlan p = runtime::validate_dispatch(in, g->info(dev));
    if (recv_x) *recv_x = to_c_tensor(p.recv_x, dev);
    if (recv_scales) *recv_scales = to_c_tensor(p.recv_scales, dev);
    if (recv_count) *recv_count = to_c_tensor(p.recv_count, dev);
  });
}

extern "C" anyep_status_t anyep_get_device_count(int32_t* count) {
  return guarded("anyep_get_device_count", [&] {
    require(count, "count");
    *count = device_count(nullptr);
  });
}
