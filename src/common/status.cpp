#include "anyep/status.h"

#include <cstdint>
#include <cstring>

extern "C" const char* anyepStatusName(anyepStatus status) {
  // The bits, not the enum: a C caller may pass any int (loading an out-of-range enum is undefined in C++).
  int32_t s;
  static_assert(sizeof status == sizeof s, "C enums are int-sized");
  std::memcpy(&s, &status, sizeof s);
  switch (s) {
    case anyepSuccess:
      return "anyepSuccess";
    case anyepInvalidArgument:
      return "anyepInvalidArgument";
    case anyepTimeout:
      return "anyepTimeout";
    case anyepTransportError:
      return "anyepTransportError";
    case anyepCudaError:
      return "anyepCudaError";
    case anyepInternalError:
      return "anyepInternalError";
    case anyepUnsupported:
      return "anyepUnsupported";
    case anyepInProgress:
      return "anyepInProgress";
  }
  return "anyepUnknownStatus";
}
