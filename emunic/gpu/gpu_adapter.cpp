// emunic/gpu/gpu_adapter.cpp — the emulated NIC's Mover for GPU memory (FI_HMEM_CUDA), on top of
// GpuMover: a copy between a registration in GPU memory and a packet buffer (host shm, registered
// with the CUDA runtime as mapped memory) is one descriptor whose completion word, in mapped host
// memory, the kernel stores after its system fence; execute() waits for that word. Linked only into
// the GPU variant of the provider (emunic/gpu/CMakeLists.txt), which defines
// anyep_emunic_make_gpu_mover() with it. Nothing touches the GPU before the first GPU copy, so
// opening endpoints in a process that never registers GPU memory creates no CUDA context.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/cuda_check.h"
#include "common/error.h"
#include "gpu_mover.h"
#include "mover.h"

namespace anyep_emunic {
namespace {

constexpr uint64_t kWaitNs = 5'000'000'000ull;  // one packet copy (<= 8 KiB): far below this unless the GPU is stuck
constexpr int kMoverSms = 8;                    // the LL kernels keep the other SMs
constexpr uint32_t kRingSlots = 1024;           // execute() posts one descriptor at a time

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// A GpuMover on one device with its completion word in mapped host memory.
struct DeviceMover {
  std::unique_ptr<gpu::GpuMover> mover;
  uint32_t* word = nullptr;      // host view
  uint32_t* word_dev = nullptr;  // device view
  uint32_t seq = 0;
};

// A packet-buffer mapping and, once a copy needed it, its registration with the CUDA runtime.
struct HostRange {
  uint8_t* base;
  size_t bytes;
  uint8_t* dev = nullptr;  // device view; null until registered
};

class GpuAdapter final : public Mover {
 public:
  const char* name() const override { return "gpu"; }

  bool reaches(fi_hmem_iface iface) const override { return iface == FI_HMEM_CUDA && have_gpu(); }
  bool atomics_on(fi_hmem_iface iface) const override { return iface == FI_HMEM_SYSTEM; }

  int check_region(fi_hmem_iface iface, const void* base, size_t len, int device) override {
    if (iface != FI_HMEM_CUDA) return -FI_ENOSYS;
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, base);
    if (e != cudaSuccess) (void)cudaGetLastError();  // the caller's next launch check must not see ours
    if (e != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) || a.device != device) {
      std::lock_guard lk(mu_);
      report("FI_HMEM_CUDA registration of " + std::to_string(len) +
             " bytes at a pointer that is not memory of CUDA device " + std::to_string(device) +
             (e != cudaSuccess ? std::string(": ") + cudaGetErrorString(e) : std::string()));
      return -FI_EINVAL;
    }
    // The mover of that device is made now, at registration, so that its preload does not wait
    // behind kernels that hold every SM later (the first copy usually comes mid-dispatch).
    std::lock_guard lk(mu_);
    try {
      device_mover(device);
    } catch (const std::exception& ex) {
      report(ex.what());
      return -FI_EIO;
    }
    return 0;
  }

  void host_mapped(void* base, size_t bytes) override {
    // The mapping covers whole pages; so does the registration.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::lock_guard lk(mu_);
    ranges_.push_back({static_cast<uint8_t*>(base), (bytes + page - 1) / page * page});
  }
  void host_unmapping(void* base) override {
    std::lock_guard lk(mu_);
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (ranges_[i].base != base) continue;
      // execute() returns only after its copy finished, and it holds mu_: nothing of ours reads
      // or writes the range any more.
      if (ranges_[i].dev) {
        const cudaError_t e = cudaHostUnregister(base);
        if (e != cudaSuccess)
          std::fprintf(stderr, "emunic gpu mover: cudaHostUnregister of a packet segment: %s\n", cudaGetErrorString(e));
      }
      ranges_.erase(ranges_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }

  int execute(const MoveDesc& d) override {
    if (d.kind != MoveDesc::kCopy) return -FI_EOPNOTSUPP;  // no atomics on GPU memory (getinfo says so)
    if (!d.len) return 0;
    const bool src_gpu = d.src_iface == FI_HMEM_CUDA, dst_gpu = d.dst_iface == FI_HMEM_CUDA;
    if (!src_gpu && !dst_gpu) {
      std::memcpy(d.dst, d.src, d.len);
      return 0;
    }
    std::lock_guard lk(mu_);
    try {
      const int device = src_gpu ? d.src_device : d.dst_device;
      // Launches go to the current device: this engine thread's may be another one.
      thread_local int current = -1;
      if (current != device) {
        anyep::cuda_check(cudaSetDevice(device), "emunic gpu mover", "cudaSetDevice");
        current = device;
      }
      DeviceMover& m = device_mover(device);
      const void* src = d.src;
      void* dst = d.dst;
      if (!src_gpu) src = device_view(const_cast<void*>(d.src), d.len);
      if (!dst_gpu) dst = device_view(d.dst, d.len);
      if (!src || !dst) {
        report("a packet buffer outside every mapped segment (the engine must announce it with host_mapped)");
        return -FI_EINVAL;
      }
      const uint32_t v = ++m.seq == 0 ? ++m.seq : m.seq;  // 0 is the word's initial value
      m.mover->post_wait(gpu::GpuMover::describe(src, dst, d.len, m.word_dev, gpu::CompletionOp::kStore32, v), kWaitNs);
      const uint64_t t0 = now_ns();
      while (__atomic_load_n(m.word, __ATOMIC_ACQUIRE) != v) {
        if (now_ns() - t0 > kWaitNs) {
          m.mover->check();  // a faulted kernel throws with CUDA's reason
          report("a copy of " + std::to_string(d.len) + " bytes did not complete within 5 s: " + m.mover->state_text());
          return -FI_ETIMEDOUT;
        }
      }
      return 0;
    } catch (const std::exception& e) {
      report(e.what());
      return -FI_EIO;
    }
  }

 private:
  static bool have_gpu() {
    static const bool yes = [] {
      int n = 0;
      if (cudaGetDeviceCount(&n) == cudaSuccess) return n > 0;
      (void)cudaGetLastError();
      return false;
    }();
    return yes;
  }
  // The first failures are printed (the engine reports only "the data mover failed").
  void report(const std::string& what) {
    if (reports_++ < 8) std::fprintf(stderr, "emunic gpu mover: %s\n", what.c_str());
  }

  DeviceMover& device_mover(int device) {
    auto it = movers_.find(device);
    if (it != movers_.end()) return it->second;
    DeviceMover m;
    gpu::GpuMoverConfig c;
    c.device = device;
    c.sms = kMoverSms;
    c.ring_slots = kRingSlots;
    m.mover = std::make_unique<gpu::GpuMover>(c);
    void* w = nullptr;
    anyep::cuda_check(cudaHostAlloc(&w, 128, cudaHostAllocMapped | cudaHostAllocPortable), "emunic gpu mover",
                      "cudaHostAlloc(completion word)");
    m.word = static_cast<uint32_t*>(w);
    *m.word = 0;
    void* wd = nullptr;
    anyep::cuda_check(cudaHostGetDevicePointer(&wd, w, 0), "emunic gpu mover",
                      "cudaHostGetDevicePointer(completion word)");
    m.word_dev = static_cast<uint32_t*>(wd);
    return movers_.emplace(device, std::move(m)).first->second;
  }

  // The device view of [p, p+len) inside a mapped segment, registering the segment on first use.
  void* device_view(void* p, size_t len) {
    auto* b = static_cast<uint8_t*>(p);
    for (HostRange& r : ranges_) {
      if (b < r.base || b + len > r.base + r.bytes) continue;
      if (!r.dev) {
        anyep::cuda_check(cudaHostRegister(r.base, r.bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
                          "emunic gpu mover", "cudaHostRegister(packet segment)");
        void* dv = nullptr;
        anyep::cuda_check(cudaHostGetDevicePointer(&dv, r.base, 0), "emunic gpu mover",
                          "cudaHostGetDevicePointer(packet segment)");
        r.dev = static_cast<uint8_t*>(dv);
      }
      return r.dev + (b - r.base);
    }
    return nullptr;
  }

  std::mutex mu_;  // GpuMover takes one posting thread; engines of several endpoints share it
  std::map<int, DeviceMover> movers_;
  std::vector<HostRange> ranges_;
  int reports_ = 0;
};

}  // namespace
}  // namespace anyep_emunic

// Never destroyed: engines may still be stopping while the process exits, and the CUDA runtime
// may already be torn down by then.
extern "C" anyep_emunic::Mover* anyep_emunic_make_gpu_mover() { return new anyep_emunic::GpuAdapter; }
