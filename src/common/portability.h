// anyep/src/common/portability.h
//
// The one place where device code meets a particular GPU toolchain. Kernels and the GPU side of
// the channel use only what is declared here for warp size, lane masks, shuffles and reductions,
// fences, scoped loads/stores, 16-byte loads/stores, atomics, timers, traps and number formats
// (BF16 pairs, FP8 e4m3, UE8M0 scales), so one kernel source builds for NVIDIA (CUDA) and AMD (HIP)
// GPUs (scripts/check/portability.sh keeps vendor instructions out of kernel files; docs/amd.md).
// What CUDA and HIP spell alike is used directly: threadIdx/blockIdx/blockDim/gridDim,
// __syncthreads, __shared__, atomicAdd/atomicExch/atomicCAS(_system), __launch_bounds__, printf,
// the uint4/int4/float2/float4 vector types and the float math functions.
//
// Warps: 32 lanes on NVIDIA, 64 on AMD's CDNA GPUs (gfx90a, gfx942; wave32 targets are refused
// below). Kernels write port::kWarpSize and full_lane_mask(), never a number; lane masks are 64-bit.
//
// Every function also compiles for the host (CPU producers and CPU tests run the same push path
// as the GPU); host versions use GCC/Clang __atomic builtins, which TSan understands.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <type_traits>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#endif

#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include <sched.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ANYEP_HD __host__ __device__
#define ANYEP_DEVICE __device__
#define ANYEP_INLINE __forceinline__
#else
#define ANYEP_HD
#define ANYEP_DEVICE
#define ANYEP_INLINE inline __attribute__((always_inline))
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define ANYEP_DEVICE_PASS 1  // this translation pass generates GPU code
#endif

// A HIP build defines ANYEP_WARP_SIZE=64 for every file (cmake/anyep_gpu.cmake), so that plain C++
// files that never see HIP (the HT geometry in anyep_runtime_contract) agree with the kernels.
#if !defined(ANYEP_WARP_SIZE)
#if defined(__HIP_PLATFORM_AMD__)
#define ANYEP_WARP_SIZE 64
#else
#define ANYEP_WARP_SIZE 32
#endif
#endif
#if (defined(__HIP_PLATFORM_AMD__) && ANYEP_WARP_SIZE != 64) || (defined(__CUDACC__) && ANYEP_WARP_SIZE != 32)
#error "anyep: ANYEP_WARP_SIZE disagrees with the GPU toolchain (64 on AMD, 32 on NVIDIA)"
#endif

// One wavefront size per build: host code (launch shapes, tests) and device code must agree.
#if defined(__HIP_DEVICE_COMPILE__)
static_assert(__AMDGCN_WAVEFRONT_SIZE == ANYEP_WARP_SIZE,
              "anyep: AMD targets with 32-lane wavefronts (RDNA) are not supported; build for CDNA (gfx90a, gfx942)");
#endif

// A kernel parameter the kernel only reads (CUDA: passed by reference into constant space).
#if defined(__CUDACC__)
#define ANYEP_GRID_CONSTANT __grid_constant__
#else
#define ANYEP_GRID_CONSTANT
#endif

namespace anyep::port {

inline constexpr int kWarpSize = ANYEP_WARP_SIZE;

// ---- scoped atomics -----------------------------------------------------------------------------
// One template per operation, for 32-bit (uint32_t, int32_t) and 64-bit (uint64_t) words:
// atomic_load, atomic_store, atomic_fetch_add, atomic_add and atomic_max (the last two return
// nothing: no acquire). Order is a C++ memory order; Scope says who must see the access in that
// order: `device` the threads of this GPU (ring heads, counters in device memory), `system` every
// GPU and the host (pinned or mapped memory, a peer GPU's memory). The host versions use the
// __atomic builtins and ignore the scope (a CPU thread is in every scope). Kernels mostly call the
// named forms further down (load_acquire_system, store_release_device, ...).

enum class Order { relaxed, acquire, release, acq_rel };
enum class Scope { device, system };

namespace detail {
// A parameter that takes no part in deduction: T comes from the pointer and the value converts to
// it, as with an overload per type (store_release_system(p64, 1)).
template <typename T>
struct same {
  using type = T;
};
template <typename T>
using same_t = typename same<T>::type;

template <typename T>
inline constexpr bool kAtomicWord =
    std::is_same_v<T, uint32_t> || std::is_same_v<T, int32_t> || std::is_same_v<T, uint64_t>;

template <Order O>
inline constexpr int kGnuOrder = O == Order::relaxed   ? __ATOMIC_RELAXED
                                 : O == Order::acquire ? __ATOMIC_ACQUIRE
                                 : O == Order::release ? __ATOMIC_RELEASE
                                                       : __ATOMIC_ACQ_REL;

#if defined(__HIPCC__)
template <Scope S>
inline constexpr int kHipScope = S == Scope::system ? __HIP_MEMORY_SCOPE_SYSTEM : __HIP_MEMORY_SCOPE_AGENT;
#endif
}  // namespace detail

// NVIDIA: PTX spells the order, scope and type inside the instruction, and inline assembly takes
// only a literal, so ANYEP_PTX_(EMIT) assembles it from literal pieces: it expands to
// EMIT(order, scope, type, constraint) for the <O, S, T> of the enclosing template (constraint: the
// register class of a T operand). The other cases are discarded at compile time.
#if defined(__CUDA_ARCH__)
#define ANYEP_PTX_TYPE_(EMIT, ord, sc)                \
  if constexpr (std::is_same_v<T, uint64_t>) {        \
    EMIT(ord, sc, "u64", "l");                        \
  } else if constexpr (std::is_same_v<T, uint32_t>) { \
    EMIT(ord, sc, "u32", "r");                        \
  } else {                                            \
    EMIT(ord, sc, "s32", "r");                        \
  }
#define ANYEP_PTX_SCOPE_(EMIT, ord)   \
  if constexpr (S == Scope::system) { \
    ANYEP_PTX_TYPE_(EMIT, ord, "sys") \
  } else {                            \
    ANYEP_PTX_TYPE_(EMIT, ord, "gpu") \
  }
#define ANYEP_PTX_(EMIT)                      \
  if constexpr (O == Order::relaxed) {        \
    ANYEP_PTX_SCOPE_(EMIT, "relaxed")         \
  } else if constexpr (O == Order::acquire) { \
    ANYEP_PTX_SCOPE_(EMIT, "acquire")         \
  } else if constexpr (O == Order::release) { \
    ANYEP_PTX_SCOPE_(EMIT, "release")         \
  } else {                                    \
    ANYEP_PTX_SCOPE_(EMIT, "acq_rel")         \
  }
#define ANYEP_PTX_LOAD_(ord, sc, ty, c) \
  asm volatile("ld." ord "." sc ".global." ty " %0, [%1];" : "=" c(v) : "l"(p) : "memory")
#define ANYEP_PTX_STORE_(ord, sc, ty, c) \
  asm volatile("st." ord "." sc ".global." ty " [%0], %1;" ::"l"(p), c(v) : "memory")
#define ANYEP_PTX_FETCH_ADD_(ord, sc, ty, c) \
  asm volatile("atom." ord "." sc ".global.add." ty " %0, [%1], %2;" : "=" c(old) : "l"(p), c(v) : "memory")
#define ANYEP_PTX_ADD_(ord, sc, ty, c) \
  asm volatile("red." ord "." sc ".global.add." ty " [%0], %1;" ::"l"(p), c(v) : "memory")
#define ANYEP_PTX_MAX_(ord, sc, ty, c) \
  asm volatile("red." ord "." sc ".global.max." ty " [%0], %1;" ::"l"(p), c(v) : "memory")
#endif

template <Order O, Scope S, typename T>
ANYEP_HD ANYEP_INLINE T atomic_load(const T* p) {
  static_assert(detail::kAtomicWord<T>, "anyep: atomics take uint32_t, int32_t or uint64_t words");
  static_assert(O == Order::relaxed || O == Order::acquire, "anyep: a load is relaxed or acquire");
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  T v;
  ANYEP_PTX_(ANYEP_PTX_LOAD_)
  return v;
#elif defined(ANYEP_DEVICE_PASS)
  return __hip_atomic_load(p, detail::kGnuOrder<O>, detail::kHipScope<S>);
#else
  return __atomic_load_n(p, detail::kGnuOrder<O>);
#endif
}

template <Order O, Scope S, typename T>
ANYEP_HD ANYEP_INLINE void atomic_store(T* p, detail::same_t<T> v) {
  static_assert(detail::kAtomicWord<T>, "anyep: atomics take uint32_t, int32_t or uint64_t words");
  static_assert(O == Order::relaxed || O == Order::release, "anyep: a store is relaxed or release");
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  ANYEP_PTX_(ANYEP_PTX_STORE_)
#elif defined(ANYEP_DEVICE_PASS)
  __hip_atomic_store(p, v, detail::kGnuOrder<O>, detail::kHipScope<S>);
#else
  __atomic_store_n(p, v, detail::kGnuOrder<O>);
#endif
}

// Returns the old value.
template <Order O, Scope S, typename T>
ANYEP_HD ANYEP_INLINE T atomic_fetch_add(T* p, detail::same_t<T> v) {
  static_assert(detail::kAtomicWord<T>, "anyep: atomics take uint32_t, int32_t or uint64_t words");
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  if constexpr (O == Order::relaxed) {
    // The toolkit's builtin: it orders nothing else, and the compiler knows it (no asm barrier).
    using W = std::conditional_t<sizeof(T) == 8, unsigned long long, T>;
    if constexpr (S == Scope::system) {
      return atomicAdd_system(reinterpret_cast<W*>(p), static_cast<W>(v));
    } else {
      return atomicAdd(reinterpret_cast<W*>(p), static_cast<W>(v));
    }
  } else {
    T old;
    ANYEP_PTX_(ANYEP_PTX_FETCH_ADD_)
    return old;
  }
#elif defined(ANYEP_DEVICE_PASS)
  return __hip_atomic_fetch_add(p, v, detail::kGnuOrder<O>, detail::kHipScope<S>);
#else
  return __atomic_fetch_add(p, v, detail::kGnuOrder<O>);
#endif
}

// Add, result unused (NVIDIA: a reduction, which does not wait for the old value).
template <Order O, Scope S, typename T>
ANYEP_HD ANYEP_INLINE void atomic_add(T* p, detail::same_t<T> v) {
  static_assert(detail::kAtomicWord<T>, "anyep: atomics take uint32_t, int32_t or uint64_t words");
  static_assert(O == Order::relaxed || O == Order::release, "anyep: an add without result is relaxed or release");
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  ANYEP_PTX_(ANYEP_PTX_ADD_)
#elif defined(ANYEP_DEVICE_PASS)
  __hip_atomic_fetch_add(p, v, detail::kGnuOrder<O>, detail::kHipScope<S>);
#else
  __atomic_fetch_add(p, v, detail::kGnuOrder<O>);
#endif
}

// Monotonic max, result unused: the word only moves forward, the largest of racing values wins.
template <Order O, Scope S, typename T>
ANYEP_HD ANYEP_INLINE void atomic_max(T* p, detail::same_t<T> v) {
  static_assert(detail::kAtomicWord<T>, "anyep: atomics take uint32_t, int32_t or uint64_t words");
  static_assert(O == Order::relaxed || O == Order::release, "anyep: a max without result is relaxed or release");
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  ANYEP_PTX_(ANYEP_PTX_MAX_)
#elif defined(ANYEP_DEVICE_PASS)
  __hip_atomic_fetch_max(p, v, detail::kGnuOrder<O>, detail::kHipScope<S>);
#else
  T cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, true, detail::kGnuOrder<O>, __ATOMIC_RELAXED)) {
  }
#endif
}

#if defined(__CUDA_ARCH__)
#undef ANYEP_PTX_TYPE_
#undef ANYEP_PTX_SCOPE_
#undef ANYEP_PTX_
#undef ANYEP_PTX_LOAD_
#undef ANYEP_PTX_STORE_
#undef ANYEP_PTX_FETCH_ADD_
#undef ANYEP_PTX_ADD_
#undef ANYEP_PTX_MAX_
#endif

// ---- the named forms kernels, the channel and the host call ------------------------------------
// Device scope: memory the caller's own GPU owns. System scope: memory shared with the host and
// other GPUs (pinned, mapped, a peer's).

// Relaxed fetch-add at device scope: claiming a ring slot needs atomicity, not ordering.
template <typename T>
ANYEP_HD ANYEP_INLINE T atomic_add_device(T* p, detail::same_t<T> v) {
  return atomic_fetch_add<Order::relaxed, Scope::device>(p, v);
}

// Acquire load at device scope (values other blocks of this GPU publish with a release: flags,
// counts, cached copies of a host index).
template <typename T>
ANYEP_HD ANYEP_INLINE T load_acquire_device(const T* p) {
  return atomic_load<Order::acquire, Scope::device>(p);
}

// Release at device scope: as store_release_system for readers on this GPU only.
template <typename T>
ANYEP_HD ANYEP_INLINE void store_release_device(T* p, detail::same_t<T> v) {
  atomic_store<Order::release, Scope::device>(p, v);
}

// Add with release at device scope, result unused (a completion count: the adder's earlier
// writes, and what it observed, happen-before a reader's acquire of the count).
template <typename T>
ANYEP_HD ANYEP_INLINE void atomic_add_release_device(T* p, detail::same_t<T> v) {
  atomic_add<Order::release, Scope::device>(p, v);
}

// Add with acquire and release at device scope; returns the old value (a completion count whose
// last adder publishes what every adder wrote: its acquire covers their releases).
template <typename T>
ANYEP_HD ANYEP_INLINE T atomic_add_acq_rel_device(T* p, detail::same_t<T> v) {
  return atomic_fetch_add<Order::acq_rel, Scope::device>(p, v);
}

// Monotonic max with release at device scope (cached copies of a host index only move forward;
// release passes on what the caller acquired with the value it publishes).
template <typename T>
ANYEP_HD ANYEP_INLINE void atomic_max_release_device(T* p, detail::same_t<T> v) {
  atomic_max<Order::release, Scope::device>(p, v);
}

// Acquire load at system scope: everything the writer (host or GPU) wrote before its release
// store of this value is visible to the reader afterwards.
template <typename T>
ANYEP_HD ANYEP_INLINE T load_acquire_system(const T* p) {
  return atomic_load<Order::acquire, Scope::system>(p);
}

// Release at system scope orders every write this thread made or observed before the store, for
// readers on any GPU and on the host.
template <typename T>
ANYEP_HD ANYEP_INLINE void store_release_system(T* p, detail::same_t<T> v) {
  atomic_store<Order::release, Scope::system>(p, v);
}

// Monotonic max at system scope with release (a consumer's running total in a peer's memory:
// stores from several warps may race, the largest wins, and the slots read before it are free).
template <typename T>
ANYEP_HD ANYEP_INLINE void atomic_max_release_system(T* p, detail::same_t<T> v) {
  atomic_max<Order::release, Scope::system>(p, v);
}

// Publish 16 bytes {lo, hi} to host-visible memory with release semantics at system scope.
// On the GPU this is ONE 16-byte vector store (one PCIe write): the consumer reads the slot with
// load16_acquire_system and sees either the old or the new 16 bytes, never a mix, as long as `p`
// is 16-byte aligned. Caveat, stated plainly: PTX's memory model treats the two elements of a
// vector store as two accesses; single-copy atomicity of the pair is a property of the hardware
// path (one aligned 16-byte PCIe write, which x86 root complexes apply to one cache line as a
// unit), not of the PTX model. tests/gpu/channel cross-checks every field of every command, so a
// torn slot on a machine where this does not hold fails the test instead of passing silently.
// The release covers this thread's earlier writes and what it observed (cumulativity): a warp
// whose lanes wrote a payload must warp_sync() before one lane publishes.
// The host version (CPU producers) stores `hi` first and `lo` last with release order, so a
// consumer that sees the new `lo` also sees the new `hi`.
ANYEP_HD ANYEP_INLINE void store16_release_system(uint64_t* p, uint64_t lo, uint64_t hi) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  asm volatile("st.release.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
#elif defined(ANYEP_DEVICE_PASS)
  __hip_atomic_store(p + 1, hi, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_store(p, lo, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  __atomic_store_n(p + 1, hi, __ATOMIC_RELAXED);
  __atomic_store_n(p, lo, __ATOMIC_RELEASE);
#endif
}

// Consumer side of store16_release_system (host only: the consumer of rings is a CPU thread).
// Reads `lo` with acquire first; `hi` is read after it, so a published `lo` implies `hi` is the
// one stored with it (host producers store hi before lo; the GPU's single 16-byte store makes both
// visible together).
inline void load16_acquire_system(const uint64_t* p, uint64_t* lo, uint64_t* hi) {
  *lo = __atomic_load_n(p, __ATOMIC_ACQUIRE);
  *hi = __atomic_load_n(p + 1, __ATOMIC_RELAXED);
}

// Full fence at system scope: orders this thread's earlier writes (e.g. token data in host-mapped
// memory or a peer GPU's memory) before its later ones as seen by the host and other devices.
// (CUDA: membar.sys, which is fence.sc.sys from sm_70 on; HIP: a seq_cst fence at system scope.)
ANYEP_HD ANYEP_INLINE void fence_system() {
#if defined(ANYEP_DEVICE_PASS)
  __threadfence_system();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// Fence at block scope: orders this thread's writes for the other threads of its block.
ANYEP_HD ANYEP_INLINE void fence_block() {
#if defined(ANYEP_DEVICE_PASS)
  __threadfence_block();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// Full fence at device scope: orders this thread's writes for the other blocks of this GPU.
ANYEP_HD ANYEP_INLINE void fence_device() {
#if defined(ANYEP_DEVICE_PASS)
  __threadfence();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// ---- device-only loads --------------------------------------------------------------------------
#if defined(__CUDACC__) || defined(__HIPCC__)
// 16-byte load of an input read once: read-only (non-coherent) path, no L1 allocation. Only for
// data nobody writes while the kernel runs; `p` must be 16-byte aligned.
ANYEP_DEVICE ANYEP_INLINE uint4 load16_read_once(const void* p) {
#if defined(__CUDA_ARCH__)
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#else
  // AMD: a plain load (a non-temporal hint is for a measurement on an AMD GPU to choose).
  return *reinterpret_cast<const uint4*>(p);
#endif
}

// One 16-byte store (`p` 16-byte aligned): payload rows, headers.
ANYEP_DEVICE ANYEP_INLINE void store16(void* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }

#if defined(__HIPCC__)
namespace detail {
// AMD: `*p` as relaxed atomic loads at scope S (32-bit words, or one 8/16-bit load for a smaller
// V): coherent at that scope, past the non-coherent per-CU cache.
template <Scope S, typename V>
ANYEP_DEVICE ANYEP_INLINE V load_words_relaxed(const V* p) {
  V v;
  if constexpr (sizeof(V) % 4 == 0) {
    uint32_t* w = reinterpret_cast<uint32_t*>(&v);
    const uint32_t* s = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
    for (unsigned i = 0; i < sizeof(V) / 4; ++i) w[i] = __hip_atomic_load(s + i, __ATOMIC_RELAXED, kHipScope<S>);
  } else if constexpr (sizeof(V) == 2) {
    const uint16_t h = __hip_atomic_load(reinterpret_cast<const uint16_t*>(p), __ATOMIC_RELAXED, kHipScope<S>);
    memcpy(&v, &h, 2);
  } else {
    static_assert(sizeof(V) == 1, "a 1-, 2- or 4k-byte type");
    const uint8_t b = __hip_atomic_load(reinterpret_cast<const uint8_t*>(p), __ATOMIC_RELAXED, kHipScope<S>);
    memcpy(&v, &b, 1);
  }
  return v;
}
}  // namespace detail
#endif

// Loads of data another GPU (or a NIC, through a proxy) wrote while this kernel runs, after the
// acquire that ordered them. load_l2: from L2, past a possibly stale L1 (peer-GPU memory; AMD:
// agent scope); load_uncached: from memory, past every cache (host memory written by a NIC; AMD:
// system scope, host memory being fine-grained). V: a 1-, 2-, 4-, 8- or 16-byte type (uint16_t,
// int, float, uint4, int4, float4), `p` aligned to its size. (nvcc's host pass parses device functions too: `*p`
// there is never run.)
template <typename V>
ANYEP_DEVICE ANYEP_INLINE V load_l2(const V* p) {
#if defined(__CUDA_ARCH__)
  return __ldcg(p);
#elif defined(__HIPCC__)
  return detail::load_words_relaxed<Scope::device>(p);
#else
  return *p;
#endif
}

template <typename V>
ANYEP_DEVICE ANYEP_INLINE V load_uncached(const V* p) {
#if defined(__CUDA_ARCH__)
  return __ldcv(p);
#elif defined(__HIPCC__)
  return detail::load_words_relaxed<Scope::system>(p);
#else
  return *p;
#endif
}
#endif

// ---- block sub-teams ------------------------------------------------------------------------------
#if defined(__CUDACC__) || defined(__HIPCC__)
// A barrier over the `threads` threads (whole warps) of one team of a block, numbered `id` in
// 1..15 (0 is __syncthreads'); the same memory ordering among its threads as __syncthreads. Lets a
// block work on several independent items at once, each with its own barrier.
// kTeamBarriers: false where the target has no named barriers; team_sync is then a whole-block
// barrier, so callers must make the whole block one team (teams = 1) there.
#if defined(__CUDA_ARCH__) || !defined(__HIPCC__)
inline constexpr bool kTeamBarriers = true;
#else
inline constexpr bool kTeamBarriers = false;
#endif
ANYEP_DEVICE ANYEP_INLINE void team_sync(int id, int threads) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id;
  (void)threads;
  __syncthreads();
#endif
}
#endif

// ---- warp-level helpers (warp-cooperative producers) ---------------------------------------------
// On the host a "warp" is the calling thread alone: lane 0 of a one-lane warp, so code written for
// warps also runs in CPU producer threads.

// Bit mask of the lanes of this warp that are executing the call.
ANYEP_HD ANYEP_INLINE uint64_t warp_active_mask() {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __activemask();
#elif defined(ANYEP_DEVICE_PASS)
  return __ballot(1);
#else
  return 1;
#endif
}

ANYEP_HD ANYEP_INLINE int warp_lane() {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  uint32_t l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return static_cast<int>(l);
#elif defined(ANYEP_DEVICE_PASS)
  return __lane_id();
#else
  return 0;
#endif
}

// Broadcast `v` from lane `src` to the lanes in `mask` (all of which must call this).
ANYEP_HD ANYEP_INLINE uint64_t warp_broadcast(uint64_t mask, uint64_t v, int src) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __shfl_sync(static_cast<unsigned>(mask), static_cast<unsigned long long>(v), src);
#elif defined(ANYEP_DEVICE_PASS)
  (void)mask;
  return __shfl(v, src);
#else
  (void)mask;
  (void)src;
  return v;
#endif
}

// Whether warp_match_any returns every lane with an equal value (a match instruction), rather
// than only the calling lane: code that counts equal lanes needs the exact answer.
#if defined(ANYEP_DEVICE_PASS) && !defined(__CUDA_ARCH__)
inline constexpr bool kExactMatchAny = false;
#else
inline constexpr bool kExactMatchAny = true;
#endif

// Lanes of `mask` whose `v` equals this lane's (all lanes of `mask` must call this).
ANYEP_HD ANYEP_INLINE uint64_t warp_match_any(uint64_t mask, uint64_t v) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __match_any_sync(static_cast<unsigned>(mask), static_cast<unsigned long long>(v));
#elif defined(ANYEP_DEVICE_PASS)
  (void)mask;
  (void)v;
  return 1ull << __lane_id();  // no match instruction: every lane is its own group (correct, slower)
#else
  (void)mask;
  (void)v;
  return 1;
#endif
}

// All lanes of a warp (the mask "every lane takes part" calls pass).
ANYEP_HD ANYEP_INLINE constexpr uint64_t full_lane_mask() {
#if defined(ANYEP_DEVICE_PASS)
  return kWarpSize == 64 ? ~0ull : (1ull << kWarpSize) - 1;
#else
  return 1;
#endif
}

// `v` of lane (this lane XOR lane_mask); every lane of the warp must call this.
template <typename T>
ANYEP_HD ANYEP_INLINE T warp_shuffle_xor(T v, int lane_mask) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __shfl_xor_sync(static_cast<unsigned>(full_lane_mask()), v, lane_mask);
#elif defined(ANYEP_DEVICE_PASS)
  return __shfl_xor(v, lane_mask);
#else
  (void)lane_mask;
  return v;
#endif
}

// `v` of lane `src`; every lane of the warp must call this.
template <typename T>
ANYEP_HD ANYEP_INLINE T warp_shuffle(T v, int src) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __shfl_sync(static_cast<unsigned>(full_lane_mask()), v, src);
#elif defined(ANYEP_DEVICE_PASS)
  return __shfl(v, src);
#else
  (void)src;
  return v;
#endif
}

// Lanes whose `pred` holds (bit i: lane i); every lane of the warp must call this.
ANYEP_HD ANYEP_INLINE uint64_t warp_ballot(bool pred) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __ballot_sync(static_cast<unsigned>(full_lane_mask()), pred);
#elif defined(ANYEP_DEVICE_PASS)
  return __ballot(pred);
#else
  return pred ? 1 : 0;
#endif
}

ANYEP_HD ANYEP_INLINE bool warp_any(bool pred) { return warp_ballot(pred) != 0; }
ANYEP_HD ANYEP_INLINE bool warp_all(bool pred) { return warp_ballot(pred) == full_lane_mask(); }

// What a lane of this warp wrote before the call, the other lanes see after it (memory and
// execution barrier among the warp's lanes; every lane of the warp must call this).
ANYEP_HD ANYEP_INLINE void warp_sync() {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  __syncwarp();
#elif defined(ANYEP_DEVICE_PASS)
  // AMD: a wavefront runs its lanes together; the fences order its memory accesses around the
  // point the compiler may not move code across.
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
}

// Sum / max over each aligned group of Width lanes (Width a power of two, at most kWarpSize);
// every lane of the warp must call this and every lane of a group gets the group's result.
// On the host (a one-lane warp) both return `v`.
template <int Width = kWarpSize, typename T>
ANYEP_HD ANYEP_INLINE T warp_reduce_sum(T v) {
  static_assert(Width > 0 && Width <= kWarpSize && (Width & (Width - 1)) == 0, "Width: power of two <= warp");
#if defined(ANYEP_DEVICE_PASS)
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v += warp_shuffle_xor(v, o);
#endif
  return v;
}

template <int Width = kWarpSize>
ANYEP_HD ANYEP_INLINE float warp_reduce_max(float v) {
  static_assert(Width > 0 && Width <= kWarpSize && (Width & (Width - 1)) == 0, "Width: power of two <= warp");
#if defined(ANYEP_DEVICE_PASS)
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v = fmaxf(v, warp_shuffle_xor(v, o));
#endif
  return v;
}

template <int Width = kWarpSize>
ANYEP_HD ANYEP_INLINE float warp_reduce_min(float v) {
  static_assert(Width > 0 && Width <= kWarpSize && (Width & (Width - 1)) == 0, "Width: power of two <= warp");
#if defined(ANYEP_DEVICE_PASS)
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v = fminf(v, warp_shuffle_xor(v, o));
#endif
  return v;
}

ANYEP_HD ANYEP_INLINE int popcount64(uint64_t x) {
#if defined(ANYEP_DEVICE_PASS)
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}

// Index of the lowest set bit (x != 0).
ANYEP_HD ANYEP_INLINE int lowest_bit64(uint64_t x) {
#if defined(ANYEP_DEVICE_PASS)
  return __ffsll(static_cast<long long>(x)) - 1;
#else
  return __builtin_ctzll(x);
#endif
}

// ---- number formats: BF16, FP8 e4m3, UE8M0 scales ------------------------------------------------
// NVIDIA: the toolkit's conversion instructions (cuda_bf16.h, cuda_fp8.h). Elsewhere (AMD with
// ROCm 5.2, which has no FP8 type; the host, where tests check them) the same conversions in
// software, bit for bit: round to nearest even; FP8 saturates finite values and infinities to
// +-448 and keeps NaN a NaN (the SATFINITE mode the kernels use). tests/unit/common/test_number_formats
// checks the software against a reference; tests/gpu/common checks it against NVIDIA's instructions.

// A BF16 tensor element, for pointers to BF16 tensors (storage only: values go through the
// conversions below, pairs as uint32_t). NVIDIA: the toolkit's type; elsewhere its 16 bits (the
// kernels only load and store it, so no vendor type is needed).
#if defined(__CUDACC__)
using bf16 = __nv_bfloat16;
#else
using bf16 = uint16_t;
#endif
static_assert(sizeof(bf16) == 2, "BF16 is 16 bits");

ANYEP_HD ANYEP_INLINE uint32_t float_bits(float f) {
#if defined(ANYEP_DEVICE_PASS)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ANYEP_HD ANYEP_INLINE float bits_float(uint32_t u) {
#if defined(ANYEP_DEVICE_PASS)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

namespace soft {

// float -> BF16 bits, round to nearest even; NaN -> the canonical NaN 0x7fff (as NVIDIA's cvt).
ANYEP_HD ANYEP_INLINE uint16_t bf16_from_float(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

ANYEP_HD ANYEP_INLINE float float_from_bf16(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// float -> FP8 e4m3 (bias 7, no infinities, 0x7f/0xff NaN), round to nearest even, saturating.
ANYEP_HD ANYEP_INLINE uint8_t fp8_e4m3_from_float(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);   // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448 (and inf): saturate to 448
  const int e = static_cast<int>(a >> 23) - 127;
  if (e < -6) {
    // Below the smallest normal (2^-6): multiples of 2^-9. The scaling is exact, so is the
    // rounding (the float rounding mode is nearest even); 8 * 2^-9 is the smallest normal, whose
    // code is 0x08, so the integer is the code either way.
    const float q = bits_float(a) * 512.0f;
    const uint32_t qi = static_cast<uint32_t>(rintf(q));
    return static_cast<uint8_t>(sign | qi);
  }
  const uint32_t m = (a & 0x7fffffu) >> 20;  // 3 mantissa bits kept
  const uint32_t rest = a & 0xfffffu;        // 20 bits dropped
  uint32_t code = (static_cast<uint32_t>(e + 7) << 3) | m;
  // Nearest even; a carry moves into the exponent. Below 448 nothing rounds past 0x7e (448).
  if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) ++code;
  return static_cast<uint8_t>(sign | code);
}

ANYEP_HD ANYEP_INLINE float float_from_fp8_e4m3(uint8_t c) {
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  const uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
  if (e == 0xfu && m == 7u) return bits_float(0x7fc00000u);  // NaN
  if (e == 0) return sign * static_cast<float>(m) * (1.0f / 512.0f);
  return sign * bits_float(((e + 120u) << 23) | (m << 20));  // 2^(e-7) * (1 + m/8)
}

}  // namespace soft

// UE8M0 scales: the scale rounded up to a power of two (the same expression on every GPU), and
// the biased exponent byte that the packed int32 scales carry (4 per int32, low byte first).
ANYEP_HD ANYEP_INLINE float round_scale_ue8m0(float scale) { return exp2f(ceilf(log2f(scale))); }
ANYEP_HD ANYEP_INLINE uint32_t ue8m0_exponent(float pow2_scale) { return (float_bits(pow2_scale) >> 23) & 0xffu; }

#if defined(__CUDACC__) || defined(__HIPCC__)
// Two BF16 values packed in 32 bits (low half first) <-> float2.
ANYEP_DEVICE ANYEP_INLINE float2 bf16x2_to_float2(uint32_t v) {
#if defined(__CUDA_ARCH__)
  __nv_bfloat162 h;
  static_assert(sizeof h == sizeof v, "bf16 pair is 32 bits");
  memcpy(&h, &v, sizeof v);
  return __bfloat1622float2(h);
#else
  return make_float2(soft::float_from_bf16(static_cast<uint16_t>(v)),
                     soft::float_from_bf16(static_cast<uint16_t>(v >> 16)));
#endif
}

// (lo, hi) -> two BF16 values packed in 32 bits, each rounded to nearest even.
ANYEP_DEVICE ANYEP_INLINE uint32_t float2_to_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t v;
  memcpy(&v, &h, sizeof v);
  return v;
#else
  return static_cast<uint32_t>(soft::bf16_from_float(lo)) | (static_cast<uint32_t>(soft::bf16_from_float(hi)) << 16);
#endif
}

// (lo, hi) -> two FP8 e4m3 values in 16 bits (low byte first), rounded to nearest even, saturated.
ANYEP_DEVICE ANYEP_INLINE uint16_t float2_to_fp8x2_e4m3(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
#else
  return static_cast<uint16_t>(soft::fp8_e4m3_from_float(lo) | (soft::fp8_e4m3_from_float(hi) << 8));
#endif
}
#endif

// ---- fast math (LogFMT) --------------------------------------------------------------------------
// Base-2 logarithm and exponential. On NVIDIA GPUs the hardware approximations (lg2.approx /
// ex2.approx: about 2^-22 relative error; log2(0) = -inf, exp2(-inf) = 0), which DeepEP's LogFMT
// uses too; elsewhere the math library (the CPU tests' reference; HIP maps it to its own unit).
ANYEP_HD ANYEP_INLINE float log2_approx(float x) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  float r;
  asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return log2f(x);
#endif
}

ANYEP_HD ANYEP_INLINE float exp2_approx(float x) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}

// ---- time and failure ----------------------------------------------------------------------------

// Nanoseconds from a monotonic clock (the GPU's global timer on the device).
ANYEP_HD ANYEP_INLINE uint64_t now_ns() {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif defined(ANYEP_DEVICE_PASS)
  return wall_clock64() * 10;  // AMD: 100 MHz constant clock
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
#endif
}

// Polite spin hint, called only by waits that found nothing to do (full ring, not yet done).
// On the host it gives the core away: a waiting CPU producer may share cores with the consumer
// it waits for (CI has 2 cores), and a pause-only spin would burn its whole time slice.
ANYEP_HD ANYEP_INLINE void spin_pause() {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  __nanosleep(32);
#elif defined(ANYEP_DEVICE_PASS)
  __builtin_amdgcn_s_sleep(1);
#else
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
  sched_yield();
#endif
}

// ---- warp votes and barriers (high-throughput kernels) -------------------------------------------

// Bit i set when lane i of `mask` passes a true `pred` (all lanes of `mask` must call this).
ANYEP_HD ANYEP_INLINE uint64_t warp_ballot(uint64_t mask, bool pred) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  return __ballot_sync(static_cast<unsigned>(mask), pred);
#elif defined(ANYEP_DEVICE_PASS)
  (void)mask;
  return __ballot(pred);
#else
  (void)mask;
  return pred ? 1u : 0u;
#endif
}

// Lanes of `mask` meet here; their earlier memory accesses are ordered before their later ones
// as seen by each other (a lane that publishes after this covers what the others wrote).
ANYEP_HD ANYEP_INLINE void warp_sync(uint64_t mask) {
#if defined(ANYEP_DEVICE_PASS) && defined(__CUDA_ARCH__)
  __syncwarp(static_cast<unsigned>(mask));
#elif defined(ANYEP_DEVICE_PASS)
  (void)mask;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  (void)mask;
#endif
}

// Bits of the lanes below this one (for prefix counts over a ballot).
ANYEP_HD ANYEP_INLINE uint64_t lanes_below() {
  const int l = warp_lane();
  return l == 0 ? 0 : (~uint64_t{0} >> (64 - l));
}

}  // namespace anyep::port

// Unrecoverable misuse detected inside a kernel (e.g. a value that does not fit its wire field):
// print what was wrong, then trap so the launch fails with an error the host sees.
#if defined(ANYEP_DEVICE_PASS)
#if defined(__CUDA_ARCH__)
#define ANYEP_DEVICE_TRAP() __trap()
#else
#define ANYEP_DEVICE_TRAP() __builtin_trap()  // HIP: ends the kernel with an error the host sees
#endif
#define ANYEP_DEVICE_FAIL(...)                  \
  do {                                          \
    printf("anyep device error: " __VA_ARGS__); \
    ANYEP_DEVICE_TRAP();                        \
  } while (0)
#endif
