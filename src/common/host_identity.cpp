#include "common/host_identity.h"

#include <unistd.h>

#include "common/read_line.h"

namespace anyep {

std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string id = name;
  const std::string b = read_first_line("/proc/sys/kernel/random/boot_id");
  if (!b.empty()) id += "/" + b;
  return id;
}

}  // namespace anyep
