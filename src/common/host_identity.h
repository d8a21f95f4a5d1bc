// anyep/src/common/host_identity.h — which machine this process runs on, as ranks compare it to
// find their host (proxy barriers) and their node (the HT mode).
#pragma once

#include <string>

namespace anyep {

// The hostname, then the kernel's boot id: containers on two machines may share a hostname.
std::string host_identity();

}  // namespace anyep
