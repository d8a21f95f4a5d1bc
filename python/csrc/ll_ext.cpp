// anyep/python/csrc/ll_ext.cpp — torch bindings for the LL runtime (anyep._C).
// Tensors in, tensor descriptors to the runtime (src/runtime/ll/api.h: every argument check, the
// output shapes, the handle layout and the launch live there), outputs allocated as the runtime
// asks, library errors mapped to Python exceptions. Diagnostics (ANYEP_LL_TRACE): diagnostics.h.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "diagnostics.h"
#include "ht_ext.h"
#include "py_bootstrap.h"
#include "runtime/ll/api.h"
#include "runtime/ll/buffer.h"
#include "tensor_convert.h"
#include "transport/bootstrap/bootstrap.h"

namespace {

using anyep::InvalidArgument;
using anyep::ext::allocate;
using anyep::ext::from_py_records;
using anyep::ext::ll_trace;
using anyep::ext::make_py_bootstrap;
using anyep::ext::ref;
using anyep::ext::stream_or_current;
using anyep::ext::to_py_bytes;
using anyep::runtime::LowLatencyBuffer;
namespace ll = anyep::ll;
namespace rt = anyep::runtime;

class LLBuffer {
 public:
  // allow_nvlink=False (deep_ep's allow_nvlink_for_low_latency_mode): every peer through the proxy,
  // over libfabric unless ANYEP_LL_PATH names a proxy path. enable_shrink: the rank mask.
  LLBuffer(int rank, int num_ranks, int64_t num_bytes, bool allow_nvlink, bool enable_shrink)
      : rt_(std::make_shared<LowLatencyBuffer>(rank, num_ranks, num_bytes, c10::cuda::current_device(),
                                               path_name(allow_nvlink), enable_shrink)) {}
  static std::string path_name(bool allow_nvlink) {
    const rt::LLPath p = rt::parse_ll_path("");
    if (!allow_nvlink && p == rt::LLPath::kAuto) return rt::ll_path_name(rt::LLPath::kProxyLibfabric);
    return rt::ll_path_name(p);
  }

  py::bytes local_info() const { return to_py_bytes(rt_->local_info()); }
  // `allgather(bytes) -> list[bytes]` over the caller's process group (torch.distributed): the
  // proxy's collective set-up runs through it, on this thread, holding the GIL.
  void connect(const std::vector<std::string>& infos, py::object allgather) {
    const std::vector<std::vector<uint8_t>> v = from_py_records(infos);
    std::unique_ptr<anyep::transport::Bootstrap> boot;
    if (!allgather.is_none()) boot = make_py_bootstrap(rt_->rank(), rt_->num_ranks(), allgather);
    rt_->connect(v, boot.get());
  }
  std::string describe_paths() const { return rt_->describe_paths(); }
  bool host_staged() const { return rt_->host_staged(); }
  bool peer_direct(int r) const { return rt_->peer_direct(r); }
  void clean() { rt_->clean(); }
  // Shrink mode: barrier (skipping masked ranks, masking a rank that does not arrive), clean, barrier.
  void clean_elastic() {
    py::gil_scoped_release nogil;  // waits up to twice ANYEP_TIMEOUT_S for the barrier kernels
    rt_->clean_elastic();
  }
  void check_error() { rt_->check_error(); }
  void destroy() { rt_->destroy(); }
  int64_t num_bytes() const { return rt_->num_bytes(); }
  bool shrink() const { return rt_->shrink(); }

  // Rank masking, stream-ordered on the current stream (as DeepEP's).
  void update_mask(int64_t rank, bool mask) {
    c10::cuda::CUDAGuard guard(rt_->device());
    rt::update_mask(*rt_, rank, mask, at::cuda::getCurrentCUDAStream());
  }
  void query_mask(const at::Tensor& mask_status) {
    c10::cuda::CUDAGuard guard(rt_->device());
    rt::query_mask(*rt_, ref(mask_status, "mask_status"), at::cuda::getCurrentCUDAStream());
  }
  void clean_mask() {
    c10::cuda::CUDAGuard guard(rt_->device());
    rt::clean_mask(*rt_, at::cuda::getCurrentCUDAStream());
  }

  // Returns (recv_x, recv_scales or None, recv_count, src_info, layout_range, hook or None).
  py::tuple dispatch(const at::Tensor& x, const at::Tensor& topk_idx, int64_t T, int64_t E,
                     std::optional<at::Tensor> cum_stats, std::optional<at::Tensor> wait_stats, bool use_fp8,
                     bool round_scale, bool use_ue8m0, bool staged, uintptr_t launch_stream) {
    ll_trace("dispatch", "enter; descriptors");
    rt::LLDispatchIn in;
    in.x = ref(x, "x");
    in.topk_idx = ref(topk_idx, "topk_idx");
    in.max_tokens = T;
    in.num_experts = E;
    in.cumulative_recv_stats = ref(cum_stats, "cumulative_local_expert_recv_stats");
    in.wait_recv_cost_stats = ref(wait_stats, "dispatch_wait_recv_cost_stats");
    in.use_fp8 = use_fp8;
    in.round_scale = round_scale;
    in.use_ue8m0 = use_ue8m0;
    ll_trace("dispatch", "argument checks and output shapes (runtime)");
    const rt::LLDispatchPlan plan = rt::dispatch_outputs(*rt_, in);

    ll_trace("dispatch", "device guard; allocating outputs");
    c10::cuda::CUDAGuard guard(rt_->device());
    const auto opts = x.options();
    at::Tensor recv_x = allocate(plan.recv_x, opts);
    at::Tensor scales = plan.recv_scales.present ? allocate(plan.recv_scales, opts) : at::Tensor();
    at::Tensor recv_count = allocate(plan.recv_count, opts);
    at::Tensor src_info = allocate(plan.src_info, opts);  // views the start of the handle's storage
    at::Tensor layout_range = allocate(plan.layout_range, opts);
    rt::LLDispatchOut out;
    out.recv_x = ref(recv_x, "recv_x");
    out.recv_scales = ref(scales, "recv_scales");
    out.recv_count = ref(recv_count, "recv_count");
    out.src_info = ref(src_info, "src_info");
    out.layout_range = ref(layout_range, "layout_range");

    ll_trace("dispatch", staged ? "launch, send phase (runtime: output checks, topk values, kernel arguments)"
                                : "launch, both phases (runtime: output checks, topk values, kernel arguments)");
    const rt::LLCall call =
        rt::dispatch(*rt_, in, plan, out, staged ? ll::kPhaseSend : ll::kPhaseBoth, stream_or_current(launch_stream));
    py::object hook = recv_hook(call, staged,
                                {x, topk_idx, recv_x, scales, recv_count, src_info, layout_range,
                                 cum_stats.value_or(at::Tensor()), wait_stats.value_or(at::Tensor())});
    ll_trace("dispatch", "building the result tuple");
    py::object recv_scales = py::none();
    if (scales.defined()) recv_scales = py::cast(scales);
    return py::make_tuple(recv_x, recv_scales, recv_count, src_info, layout_range, hook);
  }

  // Returns (combined_x, hook or None).
  py::tuple combine(const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& topk_weights,
                    const at::Tensor& src_info, const at::Tensor& layout_range, int64_t T, int64_t E,
                    std::optional<at::Tensor> out, std::optional<at::Tensor> wait_stats, bool staged,
                    uintptr_t launch_stream, bool use_logfmt) {
    ll_trace("combine", "enter; descriptors");
    rt::LLCombineIn in;
    in.x = ref(x, "x");
    in.topk_idx = ref(topk_idx, "topk_idx");
    in.topk_weights = ref(topk_weights, "topk_weights");
    in.src_info = ref(src_info, "handle src_info");
    in.layout_range = ref(layout_range, "handle layout_range");
    in.max_tokens = T;
    in.num_experts = E;
    in.wait_recv_cost_stats = ref(wait_stats, "combine_wait_recv_cost_stats");
    in.use_logfmt = use_logfmt;
    ll_trace("combine", "argument checks and output shape (runtime)");
    const rt::LLCombinePlan plan = rt::combine_outputs(*rt_, in);

    ll_trace("combine", "device guard; output");
    c10::cuda::CUDAGuard guard(rt_->device());
    at::Tensor result = out ? *out : allocate(plan.out, x.options());

    ll_trace("combine", staged ? "launch, send phase (runtime: output check, topk values, kernel arguments)"
                               : "launch, both phases (runtime: output check, topk values, kernel arguments)");
    const rt::LLCall call = rt::combine(*rt_, in, plan, ref(result, "out"), staged ? ll::kPhaseSend : ll::kPhaseBoth,
                                        stream_or_current(launch_stream));
    py::object hook = recv_hook(
        call, staged, {x, topk_idx, topk_weights, src_info, layout_range, result, wait_stats.value_or(at::Tensor())});
    ll_trace("combine", "building the result tuple");
    return py::make_tuple(result, hook);
  }

 private:
  // None after a launch of both phases; after a staged send, the hook that launches the receive
  // phase on the then-current stream. `keep` holds the tensors the kernels use until then.
  py::object recv_hook(const rt::LLCall& call, bool staged, std::vector<at::Tensor> keep) const {
    ll_trace("launch", "returned");
    if (!staged) return py::none();
    return py::cpp_function([buf = rt_, call, keep = std::move(keep)]() {
      c10::cuda::CUDAGuard g(buf->device());
      ll_trace("hook", "receive phase");
      call.launch(ll::kPhaseRecv, at::cuda::getCurrentCUDAStream());
      ll_trace("hook", "returned");
    });
  }

  std::shared_ptr<LowLatencyBuffer> rt_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "anyep runtime bindings (low-latency and high-throughput)";
  if (anyep::env::get_bool("ANYEP_LL_TRACE")) anyep::ext::install_diagnostics();
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
      .def(py::init<int, int, int64_t, bool, bool>(), py::arg("rank"), py::arg("num_ranks"), py::arg("num_bytes"),
           py::arg("allow_nvlink") = true, py::arg("enable_shrink") = false)
      .def("local_info", &LLBuffer::local_info)
      .def("connect", &LLBuffer::connect, py::arg("infos"), py::arg("allgather") = py::none())
      .def("describe_paths", &LLBuffer::describe_paths)
      .def("host_staged", &LLBuffer::host_staged)
      .def("peer_direct", &LLBuffer::peer_direct)
      .def("clean", &LLBuffer::clean)
      .def("clean_elastic", &LLBuffer::clean_elastic)
      .def("check_error", &LLBuffer::check_error)
      .def("destroy", &LLBuffer::destroy)
      .def("num_bytes", &LLBuffer::num_bytes)
      .def("shrink", &LLBuffer::shrink)
      .def("update_mask", &LLBuffer::update_mask, py::arg("rank"), py::arg("mask"))
      .def("query_mask", &LLBuffer::query_mask, py::arg("mask_status"))
      .def("clean_mask", &LLBuffer::clean_mask)
      .def("dispatch", &LLBuffer::dispatch, py::arg("x"), py::arg("topk_idx"),
           py::arg("num_max_dispatch_tokens_per_rank"), py::arg("num_experts"),
           py::arg("cumulative_local_expert_recv_stats"), py::arg("dispatch_wait_recv_cost_stats"), py::arg("use_fp8"),
           py::arg("round_scale"), py::arg("use_ue8m0"), py::arg("staged"), py::arg("launch_stream") = 0)
      .def("combine", &LLBuffer::combine, py::arg("x"), py::arg("topk_idx"), py::arg("topk_weights"),
           py::arg("src_info"), py::arg("layout_range"), py::arg("num_max_dispatch_tokens_per_rank"),
           py::arg("num_experts"), py::arg("out"), py::arg("combine_wait_recv_cost_stats"), py::arg("staged"),
           py::arg("launch_stream") = 0, py::arg("use_logfmt") = false);
  anyep::ext::register_ht(m);
}
