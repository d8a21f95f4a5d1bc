#include "anyep/status.h"

extern "C" const char* anyepStatusName(anyepStatus s) {
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
