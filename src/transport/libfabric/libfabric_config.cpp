// LibfabricConfig::from_env, built with or without libfabric (the factory's TransportSpec::from_env
// calls it either way; the environment is read here, never by the backend).
#include "common/env.h"
#include "common/error.h"
#include "transport/libfabric/libfabric_transport.h"

namespace anyep::transport::libfabric {

LibfabricConfig LibfabricConfig::from_env() {
  LibfabricConfig c;
  c.provider = env::get_string("ANYEP_FI_PROVIDER");
  const int64_t nics = env::get_int("ANYEP_FI_NICS");
  if (nics < 0 || nics > 64) throw InvalidArgument("ANYEP_FI_NICS=" + std::to_string(nics) + " not in [0, 64] (0: every domain)");
  c.num_nics = static_cast<uint32_t>(nics);
  const std::string s = env::get_string("ANYEP_FI_STRIPING");
  if (s == "bytes") c.striping = Striping::kBytes;
  else if (s == "dest") c.striping = Striping::kDest;
  else if (s == "rr") c.striping = Striping::kRoundRobin;
  else throw InvalidArgument("ANYEP_FI_STRIPING='" + s + "' is not one of bytes, dest, rr");
  return c;
}

}  // namespace anyep::transport::libfabric
