#include "transport/factory.h"

#include "common/env.h"
#include "common/error.h"
#include "common/fabric_providers.h"

namespace anyep::transport {

namespace {

std::string base_provider(const std::string& p) { return p.substr(0, p.find(';')); }

std::string names_list() {
  std::string s;
  for (const auto& n : transport_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Empty when `name`'s backend is built into this binary, else why not.
std::string not_built(const std::string& name) {
  if (fabric::provider_of(name)) {
#if ANYEP_HAVE_LIBFABRIC
    return "";
#else
    return "transport '" + name +
           "' needs the libfabric backend, which is not built into this binary "
           "(libfabric was not found at build time: install libfabric-dev and rebuild)";
#endif
  }
  if (name == "cuda-ipc") {
#if ANYEP_HAVE_CUDA_IPC
    return "";
#else
    return "transport 'cuda-ipc' is not built into this binary (it was built without a GPU toolchain: ANYEP_GPU=none)";
#endif
  }
  return "";
}

std::unique_ptr<Transport> make_inner(const TransportSpec& spec) {
  if (const std::string_view* fi = fabric::provider_of(spec.name)) {
    const std::string provider(*fi);  // "" for "libfabric": the configured one, or chosen
    libfabric::LibfabricConfig cfg = spec.libfabric;
    if (!provider.empty()) {
      if (cfg.provider.empty())
        cfg.provider = provider;
      else if (base_provider(cfg.provider) != base_provider(provider))
        throw InvalidArgument("transport '" + spec.name + "': libfabric provider '" + cfg.provider +
                              "' contradicts the name (use the name '" + base_provider(cfg.provider) +
                              "' or 'libfabric')");
    }
    if (std::string why = not_built(spec.name); !why.empty()) throw Unsupported(why);
#if ANYEP_HAVE_LIBFABRIC
    return libfabric::make_libfabric_transport(spec.rank, spec.num_ranks, cfg);
#endif
  }
  if (spec.name == "cuda-ipc") {
    if (std::string why = not_built(spec.name); !why.empty()) throw Unsupported(why);
#if ANYEP_HAVE_CUDA_IPC
    cuda_ipc::CudaIpcConfig cfg = spec.cuda_ipc;
    cfg.rank = spec.rank;
    cfg.num_ranks = spec.num_ranks;
    return cuda_ipc::make_endpoint(cfg);
#endif
  }
  if (spec.name == "loopback") {
    std::shared_ptr<loopback::Fabric> fabric = spec.loopback.fabric;
    if (!fabric) {
      if (spec.num_ranks != 1)
        throw InvalidArgument(
            "transport 'loopback': " + std::to_string(spec.num_ranks) +
            " ranks share one in-process fabric: set TransportSpec::loopback.fabric (loopback::make_fabric)");
      fabric = loopback::make_fabric(1);
    }
    return loopback::make_endpoint(fabric, spec.rank);
  }
  throw InvalidArgument("transport '" + spec.name + "' is unknown; the transports are " + names_list());
}

}  // namespace

TransportSpec TransportSpec::from_env(std::string name, uint32_t rank, uint32_t num_ranks) {
  TransportSpec s;
  s.name = std::move(name);
  s.rank = rank;
  s.num_ranks = num_ranks;
  s.chaos = chaos::ChaosConfig::from_env();
  s.libfabric = libfabric::LibfabricConfig::from_env();
  s.cuda_ipc.batch_copies = env::get_bool("ANYEP_CUDA_IPC_BATCH");
  // Native proxy atomics (ProxyConfig::from_env reads the same variable) need both from libfabric:
  // the add itself, and writes whose completion means placed (the add is posted after them).
  if (env::get_enum("ANYEP_PROXY_ATOMICS") == "native") s.libfabric.want_atomics = s.libfabric.delivery_complete = true;
  // ANYEP_FI_PROVIDER chooses only for "libfabric"; "tcp", "shm", ... name their provider.
  if (s.name != "libfabric") s.libfabric.provider.clear();
  return s;
}

const std::vector<std::string>& transport_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const fabric::Provider& p : fabric::kProviders)
      if (!p.transport.empty()) n.emplace_back(p.transport);
    n.emplace_back(fabric::kChooseName);
    n.emplace_back("cuda-ipc");
    n.emplace_back("loopback");
    return n;
  }();
  return names;
}

std::unique_ptr<Transport> make_transport(const TransportSpec& spec) {
  std::unique_ptr<Transport> t = make_inner(spec);
  if (spec.chaos) t = chaos::make_chaos_transport(std::move(t), *spec.chaos);
  return t;
}

bool available(const std::string& name, std::string* why) {
  auto say = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  bool known = false;
  for (const auto& n : transport_names()) known |= n == name;
  if (!known) return say("transport '" + name + "' is unknown; the transports are " + names_list());
  if (std::string w = not_built(name); !w.empty()) return say(w);
#if ANYEP_HAVE_LIBFABRIC
  if (const std::string_view* fi = fabric::provider_of(name); fi && !fi->empty())
    return libfabric::provider_available(std::string(*fi), why);
#endif
  return true;
}

}  // namespace anyep::transport
