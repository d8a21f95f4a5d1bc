// anyep/src/common/fabric_providers.h — the libfabric providers anyep knows, in one table: how
// libfabric spells each, the transport name that opens it (src/transport/factory.h), and the order
// in which "libfabric" without a configured provider tries them. Names only: what a provider
// offers is the transport layer's business (docs/transport.md). The table sits in common/ because
// the environment table (common/env.cpp) checks ANYEP_FI_PROVIDER against it, and common/ is the
// layer every other one may include.
#pragma once

#include <string>
#include <string_view>

namespace anyep::fabric {

struct Provider {
  std::string_view fi_name;    // as fi_getinfo takes it ("verbs;ofi_rxm": verbs under the RxM utility)
  std::string_view transport;  // the transport name that opens it; empty: only through "libfabric"
  bool auto_pick;              // tried, in table order, by "libfabric" without a configured provider
};

inline constexpr Provider kProviders[] = {
    {"efa", "efa", true},
    {"cxi", "cxi", true},
    {"verbs;ofi_rxm", "verbs", true},
    {"tcp", "tcp", false},
    {"tcp;ofi_rxm", "", true},
    {"shm", "shm", false},
    // The emulated NIC (emunic/, loaded from FI_PROVIDER_PATH): never picked on its own.
    {"emunic", "emunic", false},
};

// The transport name under which libfabric chooses the provider (ANYEP_FI_PROVIDER, or the first
// auto_pick one usable here).
inline constexpr std::string_view kChooseName = "libfabric";

// The provider a transport name opens: its fi_name, "" for kChooseName, nullptr for a name that
// is not a libfabric one.
inline const std::string_view* provider_of(std::string_view transport_name) {
  static constexpr std::string_view kChoose;
  if (transport_name == kChooseName) return &kChoose;
  for (const Provider& p : kProviders)
    if (!p.transport.empty() && p.transport == transport_name) return &p.fi_name;
  return nullptr;
}

// The fi_names of the auto_pick providers in the order tried, joined by `sep`.
inline std::string auto_pick_list(std::string_view sep = ", ") {
  std::string s;
  for (const Provider& p : kProviders)
    if (p.auto_pick) s.append(s.empty() ? "" : sep).append(p.fi_name);
  return s;
}

// The transport names of libfabric providers (table order), then kChooseName, joined by `sep`.
inline std::string transport_name_list(std::string_view sep = ", ") {
  std::string s;
  for (const Provider& p : kProviders)
    if (!p.transport.empty()) s.append(p.transport).append(sep);
  return s.append(kChooseName);
}

}  // namespace anyep::fabric
