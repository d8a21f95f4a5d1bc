// The C API's LL and HT backends in a build without CUDA (ANYEP_CUDA=OFF): GPU-free groups only.
#include "capi/ht_backend.h"
#include "capi/ll_backend.h"
#include "common/error.h"

namespace anyep::capi {
namespace {
constexpr const char* kNoCuda =
    "this anyep library was built without CUDA (ANYEP_CUDA=OFF): no GPU data path; only GPU-free groups "
    "(cfg->device = ANYEP_DEVICE_NONE) can be created";
}  // namespace

std::unique_ptr<LLBackend> make_ll_backend(const GroupSpec&, int, transport::Bootstrap&) { throw Unsupported(kNoCuda); }
std::unique_ptr<HTBackend> make_ht_backend(const GroupSpec&, int, transport::Bootstrap&) { throw Unsupported(kNoCuda); }
std::unique_ptr<HTBackend> make_ht_internode_backend(const GroupSpec&, int, int, transport::Bootstrap&) {
  throw Unsupported(kNoCuda);
}

int device_count(std::string* why) {
  if (why) *why = "no GPU: this anyep library was built without CUDA (ANYEP_CUDA=OFF)";
  return 0;
}

int resolve_device(int) { throw Unsupported(kNoCuda); }
void* device_alloc(size_t, int) { throw Unsupported(kNoCuda); }
void device_free(void*, int) {}

}  // namespace anyep::capi
