// The HT backend's internode calls where a backend does not serve them (capi/ht_backend.h).
#include "capi/ht_backend.h"

#include "common/error.h"

namespace anyep::capi {
namespace {
[[noreturn]] void not_internode(const char* call) {
  throw InternalError(std::string("capi: ") + call + " on an intranode HT backend (the group's ranks are on one node)");
}
}  // namespace

runtime::HTInternodeRoute HTBackend::route(const runtime::TensorRef&, const runtime::HTInternodeTables&,
                                           const runtime::HTConfig&, int64_t, void*) {
  not_internode("route");
}
void HTBackend::internode_dispatch(const runtime::HTInternodeRoute&, const runtime::HTInternodeTables&,
                                   const runtime::TensorRef&, const runtime::TensorRef&, const runtime::TensorRef&,
                                   const runtime::HTConfig&, int64_t, const HTOutputs&, void*) {
  not_internode("internode_dispatch");
}
void HTBackend::internode_combine(const runtime::HTInternodeRoute&, const runtime::HTInternodeTables&,
                                  const runtime::TensorRef&, const runtime::TensorRef&, const runtime::HTConfig&,
                                  const runtime::TensorRef&, const runtime::TensorRef&, void*) {
  not_internode("internode_combine");
}

}  // namespace anyep::capi
