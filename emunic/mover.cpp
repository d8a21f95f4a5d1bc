// The host mover: the CPU copies and applies atomics on host memory.
#include "mover.h"

#include <cstring>
#include <mutex>

namespace anyep_emunic {

namespace {

template <class T>
int apply(fi_op op, T* dst, const T* src, T* result, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T v = src[i];
    T old;
    switch (op) {
      case FI_SUM:
        old = __atomic_fetch_add(dst + i, v, __ATOMIC_SEQ_CST);
        break;
      case FI_BOR:
        old = __atomic_fetch_or(dst + i, v, __ATOMIC_SEQ_CST);
        break;
      case FI_BAND:
        old = __atomic_fetch_and(dst + i, v, __ATOMIC_SEQ_CST);
        break;
      case FI_BXOR:
        old = __atomic_fetch_xor(dst + i, v, __ATOMIC_SEQ_CST);
        break;
      case FI_ATOMIC_WRITE:
        old = __atomic_exchange_n(dst + i, v, __ATOMIC_SEQ_CST);
        break;
      case FI_ATOMIC_READ:
        old = __atomic_load_n(dst + i, __ATOMIC_SEQ_CST);
        break;
      case FI_MIN:
      case FI_MAX: {
        old = __atomic_load_n(dst + i, __ATOMIC_SEQ_CST);
        while ((op == FI_MIN ? v < old : v > old) &&
               !__atomic_compare_exchange_n(dst + i, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
        break;
      }
      default:
        return -FI_EOPNOTSUPP;
    }
    if (result) result[i] = old;
  }
  return 0;
}

class HostMover final : public Mover {
 public:
  const char* name() const override { return "host"; }
  bool reaches(fi_hmem_iface iface) const override { return iface == FI_HMEM_SYSTEM; }
  int execute(const MoveDesc& d) override {
    if (d.kind == MoveDesc::kCopy) {
      if (d.len) std::memcpy(d.dst, d.src, d.len);
      return 0;
    }
    switch (d.datatype) {
      case FI_UINT64:
        return apply(d.op, static_cast<uint64_t*>(d.dst), static_cast<const uint64_t*>(d.src),
                     static_cast<uint64_t*>(d.result), d.count);
      case FI_INT64:
        return apply(d.op, static_cast<int64_t*>(d.dst), static_cast<const int64_t*>(d.src),
                     static_cast<int64_t*>(d.result), d.count);
      case FI_UINT32:
        return apply(d.op, static_cast<uint32_t*>(d.dst), static_cast<const uint32_t*>(d.src),
                     static_cast<uint32_t*>(d.result), d.count);
      case FI_INT32:
        return apply(d.op, static_cast<int32_t*>(d.dst), static_cast<const int32_t*>(d.src),
                     static_cast<int32_t*>(d.result), d.count);
      default:
        return -FI_EOPNOTSUPP;
    }
  }
};

}  // namespace

size_t datatype_size(fi_datatype t) {
  switch (t) {
    case FI_UINT64:
    case FI_INT64:
      return 8;
    case FI_UINT32:
    case FI_INT32:
      return 4;
    default:
      return 0;
  }
}

bool host_atomic_supported(fi_datatype t, fi_op op) {
  if (!datatype_size(t)) return false;
  switch (op) {
    case FI_SUM:
    case FI_MIN:
    case FI_MAX:
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR:
    case FI_ATOMIC_WRITE:
    case FI_ATOMIC_READ:
      return true;
    default:
      return false;
  }
}

Mover& host_mover() {
  static HostMover m;
  return m;
}

Mover* gpu_mover() {
  static Mover* m = anyep_emunic_make_gpu_mover ? anyep_emunic_make_gpu_mover() : nullptr;
  return m;
}

void note_host_mapped(void* base, size_t bytes) {
  if (Mover* g = gpu_mover()) g->host_mapped(base, bytes);
}
void note_host_unmapping(void* base) {
  if (Mover* g = gpu_mover()) g->host_unmapping(base);
}

}  // namespace anyep_emunic
