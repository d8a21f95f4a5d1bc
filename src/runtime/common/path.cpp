#include "runtime/common/path.h"

#include "common/env.h"
#include "common/error.h"

namespace anyep::runtime {

LLPath parse_ll_path(const std::string& name) {
  const std::string v = name.empty() ? env::get_enum("ANYEP_LL_PATH") : name;
  if (v == "auto") return LLPath::kAuto;
  if (v == "proxy-cuda-ipc") return LLPath::kProxyCudaIpc;
  if (v == "proxy-libfabric") return LLPath::kProxyLibfabric;
  throw InvalidArgument("anyep LL: path '" + v +
                        "' (ANYEP_LL_PATH) is not one of auto, proxy-cuda-ipc, proxy-libfabric");
}

const char* ll_path_name(LLPath p) {
  switch (p) {
    case LLPath::kAuto:
      return "auto";
    case LLPath::kProxyCudaIpc:
      return "proxy-cuda-ipc";
    case LLPath::kProxyLibfabric:
      return "proxy-libfabric";
  }
  return "?";
}

}  // namespace anyep::runtime
