/* anyep/include/anyep/status.h — status codes returned at the C boundary. */
#ifndef ANYEP_STATUS_H
#define ANYEP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum anyep_status {
  ANYEP_SUCCESS = 0,
  ANYEP_ERR_INVALID_ARGUMENT = 1, /* bad input: the message names the argument */
  ANYEP_ERR_TIMEOUT = 2,          /* a wait ran past its limit: the message names what was missing */
  ANYEP_ERR_TRANSPORT = 3,        /* the NIC layer failed (provider error, peer unreachable) */
  ANYEP_ERR_CUDA = 4,             /* a CUDA runtime/driver call failed */
  ANYEP_ERR_INTERNAL = 5,         /* a broken invariant inside anyep (a bug: please report) */
  ANYEP_ERR_UNSUPPORTED = 6,      /* the build or the machine lacks what the call needs */
  ANYEP_ERR_IN_PROGRESS = 7       /* staged operation not yet complete */
} anyep_status_t;

/* Short, static name of a status code ("ANYEP_ERR_TIMEOUT"; "ANYEP_ERR_UNKNOWN" for another value). */
const char* anyep_status_name(anyep_status_t status);

/* ---- deprecated names -------------------------------------------------------------------------
 * The first releases spelled the status type and its values in camel case. They remain as aliases
 * of the names above and will be removed in a later release: use anyep_status_t, ANYEP_SUCCESS,
 * ANYEP_ERR_* and anyep_status_name. */
#if defined(__GNUC__) || defined(__clang__)
#define ANYEP_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define ANYEP_DEPRECATED(msg)
#endif
typedef anyep_status_t anyepStatus ANYEP_DEPRECATED("use anyep_status_t");
#define anyepSuccess ANYEP_SUCCESS /* deprecated: ANYEP_SUCCESS and the ANYEP_ERR_* below */
#define anyepInvalidArgument ANYEP_ERR_INVALID_ARGUMENT
#define anyepTimeout ANYEP_ERR_TIMEOUT
#define anyepTransportError ANYEP_ERR_TRANSPORT
#define anyepCudaError ANYEP_ERR_CUDA
#define anyepInternalError ANYEP_ERR_INTERNAL
#define anyepUnsupported ANYEP_ERR_UNSUPPORTED
#define anyepInProgress ANYEP_ERR_IN_PROGRESS
/* Deprecated: anyep_status_name (this one answers the old spellings, "anyepTimeout"). */
const char* anyepStatusName(anyep_status_t status) ANYEP_DEPRECATED("use anyep_status_name");

#ifdef __cplusplus
}
#endif
#endif /* ANYEP_STATUS_H */
