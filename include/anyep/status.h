/* anyep/include/anyep/status.h — status codes returned at the C boundary. */
#ifndef ANYEP_STATUS_H
#define ANYEP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum anyepStatus {
  anyepSuccess = 0,
  anyepInvalidArgument = 1, /* bad input: the message names the argument */
  anyepTimeout = 2,         /* a wait ran past its limit: the message names what was missing */
  anyepTransportError = 3,  /* the NIC layer failed (provider error, peer unreachable) */
  anyepCudaError = 4,       /* a CUDA runtime/driver call failed */
  anyepInternalError = 5,   /* a broken invariant inside anyep (a bug: please report) */
  anyepUnsupported = 6,     /* the build or the machine lacks what the call needs */
  anyepInProgress = 7       /* staged operation not yet complete */
} anyepStatus;

/* Short, static name of a status code ("anyepTimeout"). */
const char* anyepStatusName(anyepStatus status);

#ifdef __cplusplus
}
#endif
#endif /* ANYEP_STATUS_H */
