// anyep/python/csrc/ll_ext.cpp — torch bindings for the LL runtime (anyep._C).
// Tensor checks, output allocation and argument marshalling only: the protocol lives in
// src/kernels and src/runtime. Every bad input raises before any kernel is launched.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "runtime/ll_buffer.h"
#include "transport/bootstrap/bootstrap.h"

namespace {

using anyep::InvalidArgument;
using anyep::LLShape;
using anyep::LowLatencyBuffer;
namespace ll = anyep::ll;

// ---- diagnostics (ANYEP_LL_TRACE=1) ------------------------------------------------------------
// One stderr line per step of a call, flushed at once, so a crash names the last step reached; and
// a native backtrace on SIGSEGV/SIGBUS/SIGABRT (frames in this module print as _C...so(+offset):
// resolve them with addr2line -f -C -e <module> <offset>). Off by default: no cost.
bool g_trace = false;

void ll_trace(const char* call, const char* what) {
  if (!g_trace) return;
  std::fprintf(stderr, "anyep._C trace: %s: %s\n", call, what);
  std::fflush(stderr);
}

struct sigaction g_prev_action[3];
constexpr int kFatalSignals[3] = {SIGSEGV, SIGBUS, SIGABRT};

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  char head[160];
  const int n = std::snprintf(head, sizeof(head), "anyep._C: fatal signal %d (fault address %p); native backtrace:\n", sig,
                              info ? info->si_addr : nullptr);
  if (n > 0) (void)!write(2, head, static_cast<size_t>(n));
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, 2);
  // Hand the signal on to the previous handler (Python's faulthandler prints the Python stack,
  // then the default action ends the process): restore it; the faulting instruction runs again.
  for (int i = 0; i < 3; ++i)
    if (kFatalSignals[i] == sig) sigaction(sig, &g_prev_action[i], nullptr);
  if (sig == SIGABRT) raise(sig);
}

void install_diagnostics() {
  g_trace = true;
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kFatalSignals[i], &sa, &g_prev_action[i]);
  ll_trace("module", "ANYEP_LL_TRACE on: step trace and native backtrace on fatal signals");
}

// Formatted by hand: any iostream insertion crashed inside this module on the device (SIGSEGV in
// std::ostream::_M_insert, 2026-11-22; see python/CMakeLists.txt); std::to_string does not stream.
std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// int32 words after the two planes of a handle's src_info storage: [0] = the dispatch's buffer half.
constexpr int64_t kHandleTail = 4;

void expect(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument(what);
}

void expect_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, int dim, int device) {
  expect(t.defined(), std::string(name) + " is missing");
  expect(t.scalar_type() == dtype, std::string(name) + " must be " + std::string(c10::toString(dtype)) + ", got " +
                                       std::string(c10::toString(t.scalar_type())));
  expect(t.dim() == dim, std::string(name) + " must have " + std::to_string(dim) + " dimensions, got shape " + shape_str(t));
  expect(t.is_cuda() && t.get_device() == device,
         std::string(name) + " must be a CUDA tensor on device " + std::to_string(device));
  expect(t.is_contiguous(), std::string(name) + " must be contiguous");
}

bool capturing() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(), &st);
  return st != cudaStreamCaptureStatusNone;
}

// topk_idx values in [-1, E): checked on the host (one small copy) unless capturing a graph or
// the caller turned checks off; the kernels also refuse out-of-range entries.
void check_topk_values(const at::Tensor& topk_idx, int64_t E, bool check_values) {
  if (!check_values || topk_idx.numel() == 0) return;
  ll_trace("topk check", "cudaStreamIsCapturing on the current stream");
  if (capturing()) return;
  ll_trace("topk check", "topk_idx.min/max().item()");
  const auto mn = topk_idx.min().item<int64_t>();
  const auto mx = topk_idx.max().item<int64_t>();
  ll_trace("topk check", "done");
  expect(mn >= -1 && mx < E, "topk_idx holds values in [" + std::to_string(mn) + ", " + std::to_string(mx) +
                                 "], outside [-1, num_experts=" + std::to_string(E) + ")");
}

// Launches both phases now (returns None), or the send phase now and returns the hook that
// launches the receive phase on the then-current stream; `keep` holds the tensors the kernels
// use until that launch.
template <typename Args>
py::object launch_phases(const std::shared_ptr<LowLatencyBuffer>& rt, const Args& a, bool staged,
                         std::vector<at::Tensor> keep) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  ll_trace("launch", staged ? "send phase (staged)" : "both phases");
  if (!staged) {
    rt->launch(a, ll::kPhaseBoth, stream);
    ll_trace("launch", "returned");
    return py::none();
  }
  rt->launch(a, ll::kPhaseSend, stream);
  ll_trace("launch", "returned; building the receive hook");
  return py::cpp_function([rt, a, keep = std::move(keep)]() {
    c10::cuda::CUDAGuard g(rt->device());
    ll_trace("hook", "receive phase");
    rt->launch(a, ll::kPhaseRecv, at::cuda::getCurrentCUDAStream());
    ll_trace("hook", "returned");
  });
}

class LLBuffer {
 public:
  // allow_nvlink=False (deep_ep's allow_nvlink_for_low_latency_mode): every peer through the proxy,
  // over libfabric unless ANYEP_LL_PATH names a proxy path.
  LLBuffer(int rank, int num_ranks, int64_t num_bytes, bool allow_nvlink)
      : rt_(std::make_shared<LowLatencyBuffer>(rank, num_ranks, num_bytes, c10::cuda::current_device(),
                                               path_name(allow_nvlink))),
        check_values_(anyep::env::get_bool("ANYEP_LL_CHECK_INPUTS")) {}
  static std::string path_name(bool allow_nvlink) {
    const anyep::LLPath p = anyep::parse_ll_path("");
    if (!allow_nvlink && p == anyep::LLPath::kAuto) return anyep::ll_path_name(anyep::LLPath::kProxyLibfabric);
    return anyep::ll_path_name(p);
  }

  py::bytes local_info() const {
    const auto v = rt_->local_info();
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
  }
  // `allgather(bytes) -> list[bytes]` over the caller's process group (torch.distributed): the
  // proxy's collective set-up runs through it, on this thread, holding the GIL.
  void connect(const std::vector<std::string>& infos, py::object allgather) {
    std::vector<std::vector<uint8_t>> v;
    for (const auto& s : infos) v.emplace_back(s.begin(), s.end());
    std::unique_ptr<anyep::transport::Bootstrap> boot;
    if (!allgather.is_none()) {
      boot = anyep::transport::make_callback_bootstrap(
          static_cast<uint32_t>(rt_->rank()), static_cast<uint32_t>(rt_->num_ranks()),
          [allgather](const std::vector<uint8_t>& mine) {
            const py::list got(allgather(py::bytes(reinterpret_cast<const char*>(mine.data()), mine.size())));
            std::vector<std::vector<uint8_t>> all;
            for (const auto& item : got) {
              const std::string b = item.cast<std::string>();
              all.emplace_back(b.begin(), b.end());
            }
            return all;
          });
    }
    rt_->connect(v, boot.get());
  }
  std::string describe_paths() const { return rt_->describe_paths(); }
  bool host_staged() const { return rt_->host_staged(); }
  bool peer_direct(int r) const { return rt_->peer_direct(r); }
  void clean() { rt_->clean(); }
  void check_error() { rt_->check_error(); }
  void destroy() { rt_->destroy(); }
  int64_t num_bytes() const { return rt_->num_bytes(); }

  // Returns (recv_x, recv_scales or None, recv_count, src_info, layout_range, hook or None).
  py::tuple dispatch(const at::Tensor& x, const at::Tensor& topk_idx, int64_t T, int64_t E,
                     std::optional<at::Tensor> cum_stats, std::optional<at::Tensor> wait_stats, bool use_fp8,
                     bool round_scale, bool use_ue8m0, bool staged) {
    ll_trace("dispatch", "enter");
    const int dev = rt_->device();
    const int R = rt_->num_ranks();
    expect_tensor(x, "x", at::kBFloat16, 2, dev);
    expect_tensor(topk_idx, "topk_idx", at::kLong, 2, dev);
    const int64_t N = x.size(0), H = x.size(1), K = topk_idx.size(1);
    expect(topk_idx.size(0) == N, "topk_idx has " + std::to_string(topk_idx.size(0)) + " rows, x has " + std::to_string(N));
    expect(N <= T, "x has " + std::to_string(N) + " tokens, more than num_max_dispatch_tokens_per_rank=" + std::to_string(T));
    expect(E % R == 0, "num_experts=" + std::to_string(E) + " is not a multiple of the number of ranks " + std::to_string(R));
    expect(!use_ue8m0 || (use_fp8 && round_scale), "use_ue8m0 needs use_fp8=True and round_scale=True");
    expect(!use_ue8m0 || H % 512 == 0, "use_ue8m0 needs hidden to be a multiple of 512, got " + std::to_string(H));
    const int64_t L = E / R;
    if (cum_stats) {
      expect_tensor(*cum_stats, "cumulative_local_expert_recv_stats", at::kInt, 1, dev);
      expect(cum_stats->size(0) == L, "cumulative_local_expert_recv_stats must have num_local_experts=" + std::to_string(L) + " entries");
    }
    if (wait_stats) {
      expect_tensor(*wait_stats, "dispatch_wait_recv_cost_stats", at::kLong, 1, dev);
      expect(wait_stats->size(0) == R, "dispatch_wait_recv_cost_stats must have num_ranks=" + std::to_string(R) + " entries");
    }
    const LLShape shape{T, H, E};
    ll_trace("dispatch", "tensor checks passed; layout check");
    rt_->layout_for(shape);  // hidden / size checks
    check_topk_values(topk_idx, E, check_values_);

    ll_trace("dispatch", "device guard");
    c10::cuda::CUDAGuard guard(dev);
    ll::DispatchArgs a;
    ll_trace("dispatch", "kernel arguments (runtime)");
    a.c = rt_->next_dispatch_common(shape, static_cast<int>(N), static_cast<int>(K));
    ll_trace("dispatch", "allocating outputs");
    const auto opts = x.options();
    const int64_t RT = R * T;
    at::Tensor recv_x = at::empty({L, RT, H}, opts.dtype(use_fp8 ? at::kFloat8_e4m3fn : at::kBFloat16));
    py::object recv_scales = py::none();
    at::Tensor scales;
    if (use_fp8) {
      // Column-major scales as DeepEP returns them: storage [L, groups, R*T], view [L, R*T, groups].
      if (use_ue8m0)
        scales = at::empty({L, H / 512, RT}, opts.dtype(at::kInt)).transpose(1, 2);
      else
        scales = at::empty({L, H / 128, RT}, opts.dtype(at::kFloat)).transpose(1, 2);
      recv_scales = py::cast(scales);
    }
    at::Tensor recv_count = at::empty({L}, opts.dtype(at::kInt));
    // src_info's storage holds a second plane [L, R*T] with each row's top-k slot, which combine
    // needs to address the home slot, and after it the buffer half this dispatch used (combine
    // stages rows for proxied peers there); the returned tensor is the first plane (DeepEP's shape).
    at::Tensor info = at::empty({2 * L * RT + kHandleTail}, opts.dtype(at::kInt));
    at::Tensor src_info = info.narrow(0, 0, L * RT).view({L, RT});
    at::Tensor layout_range = at::empty({L, R}, opts.dtype(at::kLong));
    ll_trace("dispatch", "outputs allocated; data pointers");
    a.x = x.data_ptr();
    a.topk_idx = topk_idx.data_ptr<int64_t>();
    a.fmt = !use_fp8 ? ll::Format::kBF16 : (use_ue8m0 ? ll::Format::kFP8UE8M0 : ll::Format::kFP8);
    a.round_scale = round_scale;
    a.recv_x = recv_x.data_ptr();
    a.recv_scales = use_fp8 ? scales.data_ptr() : nullptr;
    a.recv_count = recv_count.data_ptr<int32_t>();
    a.src_info = info.data_ptr<int32_t>();
    a.src_topk = info.data_ptr<int32_t>() + L * RT;
    a.handle_half = info.data_ptr<int32_t>() + 2 * L * RT;
    a.layout_range = layout_range.data_ptr<int64_t>();
    a.cumulative_recv_stats = cum_stats ? cum_stats->data_ptr<int32_t>() : nullptr;
    a.wait_recv_cost_stats = wait_stats ? wait_stats->data_ptr<int64_t>() : nullptr;

    py::object hook = launch_phases(rt_, a, staged, {x, topk_idx, info, recv_x, scales, recv_count, layout_range});
    ll_trace("dispatch", "building the result tuple");
    return py::make_tuple(recv_x, recv_scales, recv_count, src_info, layout_range, hook);
  }

  // Returns (combined_x, hook or None).
  py::tuple combine(const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& topk_weights,
                    const at::Tensor& src_info, const at::Tensor& layout_range, int64_t T, int64_t E,
                    std::optional<at::Tensor> out, std::optional<at::Tensor> wait_stats, bool staged) {
    ll_trace("combine", "enter");
    const int dev = rt_->device();
    const int R = rt_->num_ranks();
    expect(E % R == 0, "num_experts=" + std::to_string(E) + " is not a multiple of the number of ranks " + std::to_string(R));
    const int64_t L = E / R, RT = R * T;
    expect_tensor(x, "x", at::kBFloat16, 3, dev);
    const int64_t H = x.size(2);
    expect(x.size(0) == L && x.size(1) == RT, "x must have shape [num_local_experts=" + std::to_string(L) +
                                                  ", num_ranks*num_max_dispatch_tokens_per_rank=" + std::to_string(RT) +
                                                  ", hidden], got " + shape_str(x));
    expect_tensor(topk_idx, "topk_idx", at::kLong, 2, dev);
    expect_tensor(topk_weights, "topk_weights", at::kFloat, 2, dev);
    const int64_t N = topk_idx.size(0), K = topk_idx.size(1);
    expect(topk_weights.size(0) == N && topk_weights.size(1) == K,
           "topk_weights must have the shape of topk_idx " + shape_str(topk_idx) + ", got " + shape_str(topk_weights));
    expect(N <= T, "topk_idx has " + std::to_string(N) + " tokens, more than num_max_dispatch_tokens_per_rank=" + std::to_string(T));
    expect_tensor(src_info, "handle src_info", at::kInt, 2, dev);
    expect(src_info.size(0) == L && src_info.size(1) == RT, "handle src_info has shape " + shape_str(src_info) +
                                                                ", expected [" + std::to_string(L) + ", " + std::to_string(RT) + "]");
    expect(src_info.storage_offset() == 0 &&
               src_info.storage().nbytes() >= static_cast<size_t>((2 * L * RT + kHandleTail) * 4),
           "handle was not produced by anyep low_latency_dispatch (src_info lacks the top-k slot plane)");
    expect_tensor(layout_range, "handle layout_range", at::kLong, 2, dev);
    expect(layout_range.size(0) == L && layout_range.size(1) == R, "handle layout_range has shape " + shape_str(layout_range));
    if (wait_stats) {
      expect_tensor(*wait_stats, "combine_wait_recv_cost_stats", at::kLong, 1, dev);
      expect(wait_stats->size(0) == R, "combine_wait_recv_cost_stats must have num_ranks=" + std::to_string(R) + " entries");
    }
    at::Tensor result;
    if (out) {
      expect_tensor(*out, "out", at::kBFloat16, 2, dev);
      expect(out->size(0) == N && out->size(1) == H, "out must have shape [" + std::to_string(N) + ", " + std::to_string(H) + "], got " + shape_str(*out));
      result = *out;
    } else {
      result = at::empty({N, H}, x.options());
    }
    const LLShape shape{T, H, E};
    ll_trace("combine", "tensor checks passed; layout check");
    rt_->layout_for(shape);
    check_topk_values(topk_idx, E, check_values_);

    ll_trace("combine", "device guard");
    c10::cuda::CUDAGuard guard(dev);
    ll::CombineArgs a;
    ll_trace("combine", "kernel arguments (runtime)");
    a.c = rt_->next_combine_common(shape, static_cast<int>(N), static_cast<int>(K));
    a.x = x.data_ptr();
    a.src_info = src_info.data_ptr<int32_t>();
    a.src_topk = src_info.data_ptr<int32_t>() + L * RT;
    a.handle_half = src_info.data_ptr<int32_t>() + 2 * L * RT;
    a.layout_range = layout_range.data_ptr<int64_t>();
    a.topk_idx = topk_idx.data_ptr<int64_t>();
    a.topk_weights = topk_weights.data_ptr<float>();
    a.out = result.data_ptr();
    a.wait_recv_cost_stats = wait_stats ? wait_stats->data_ptr<int64_t>() : nullptr;
    py::object hook = launch_phases(rt_, a, staged, {x, topk_idx, topk_weights, src_info, layout_range, result});
    ll_trace("combine", "building the result tuple");
    return py::make_tuple(result, hook);
  }

 private:
  std::shared_ptr<LowLatencyBuffer> rt_;
  bool check_values_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "anyep low-latency runtime bindings";
  if (anyep::env::get_bool("ANYEP_LL_TRACE")) install_diagnostics();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const anyep::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const anyep::TimeoutError& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const anyep::Unsupported& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    }
  });
  m.def("size_hint", &LowLatencyBuffer::size_hint, py::arg("num_max_dispatch_tokens_per_rank"), py::arg("hidden"),
        py::arg("num_ranks"), py::arg("num_experts"));
  py::class_<LLBuffer>(m, "LLBuffer")
      .def(py::init<int, int, int64_t, bool>(), py::arg("rank"), py::arg("num_ranks"), py::arg("num_bytes"),
           py::arg("allow_nvlink") = true)
      .def("local_info", &LLBuffer::local_info)
      .def("connect", &LLBuffer::connect, py::arg("infos"), py::arg("allgather") = py::none())
      .def("describe_paths", &LLBuffer::describe_paths)
      .def("host_staged", &LLBuffer::host_staged)
      .def("peer_direct", &LLBuffer::peer_direct)
      .def("clean", &LLBuffer::clean)
      .def("check_error", &LLBuffer::check_error)
      .def("destroy", &LLBuffer::destroy)
      .def("num_bytes", &LLBuffer::num_bytes)
      .def("dispatch", &LLBuffer::dispatch)
      .def("combine", &LLBuffer::combine);
}
