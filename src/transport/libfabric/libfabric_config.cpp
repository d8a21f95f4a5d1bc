// LibfabricConfig::from_env, built with or without libfabric (the factory's TransportSpec::from_env
// calls it either way; the environment is read here, never by the backend).
#include "common/env.h"
#include "common/error.h"
#include "transport/libfabric/libfabric_transport.h"

namespace anyep::transport::libfabric {

LibfabricConfig LibfabricConfig::from_env() {
  LibfabricConfig c;
  c.provider = env::get_enum("ANYEP_FI_PROVIDER");
  c.num_nics = static_cast<uint32_t>(env::get_count("ANYEP_FI_NICS"));
  const std::string s = env::get_enum("ANYEP_FI_STRIPING");
  if (s == "bytes")
    c.striping = Striping::kBytes;
  else if (s == "dest")
    c.striping = Striping::kDest;
  else if (s == "rr")
    c.striping = Striping::kRoundRobin;
  else
    throw InvalidArgument("ANYEP_FI_STRIPING='" + s + "' is not one of bytes, dest, rr");
  return c;
}

}  // namespace anyep::transport::libfabric
