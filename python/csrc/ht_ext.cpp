// anyep/python/csrc/ht_ext.cpp — torch bindings for the HT runtime (src/runtime/ht/buffer.h):
// tensors to descriptors, outputs allocated as the runtime specifies them on the current stream,
// calls launched on the given stream. Every argument check lives in the runtime (ht/validate.h).
#include "ht_ext.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/host_identity.h"
#include "py_bootstrap.h"
#include "runtime/ht/buffer.h"
#include "runtime/ht/internode.h"
#include "runtime/ht/internode_plan.h"
#include "runtime/ht/topology.h"
#include "tensor_convert.h"

namespace anyep::ext {
namespace {

namespace py = pybind11;
namespace rt = anyep::runtime;
using OptT = std::optional<at::Tensor>;

py::object or_none(const at::Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }
at::Tensor maybe_allocate(const rt::OutputSpec& s, const at::TensorOptions& o) {
  return s.present ? allocate(s, o) : at::Tensor();
}

rt::HTConfig config_of(int64_t num_sms, int64_t chunk_send, int64_t chunk_recv) {
  rt::HTConfig c;
  c.num_sms = num_sms;
  c.chunk_send = chunk_send;
  c.chunk_recv = chunk_recv;
  return c;
}

// A dispatch's outputs, allocated as the runtime specifies them, and their descriptors.
struct DispatchOutputs {
  at::Tensor recv_x, recv_scales, recv_topk_idx, recv_topk_weights, rcpm, recv_src_idx, send_head;

  DispatchOutputs(const rt::HTDispatchOutSpecs& spec, const at::TensorOptions& o)
      : recv_x(allocate(spec.recv_x, o)),
        recv_scales(maybe_allocate(spec.recv_x_scales, o)),
        recv_topk_idx(maybe_allocate(spec.recv_topk_idx, o)),
        recv_topk_weights(maybe_allocate(spec.recv_topk_weights, o)),
        rcpm(allocate(spec.recv_channel_prefix_matrix, o)),
        recv_src_idx(allocate(spec.recv_src_idx, o)),
        send_head(allocate(spec.send_head, o)) {}

  rt::HTDispatchOut refs() const {
    rt::HTDispatchOut out;
    out.recv_x = ref(recv_x, "recv_x");
    out.recv_x_scales = ref(recv_scales, "recv_x_scales");
    out.recv_topk_idx = ref(recv_topk_idx, "recv_topk_idx");
    out.recv_topk_weights = ref(recv_topk_weights, "recv_topk_weights");
    out.recv_channel_prefix_matrix = ref(rcpm, "recv_channel_prefix_matrix");
    out.recv_src_idx = ref(recv_src_idx, "recv_src_idx");
    out.send_head = ref(send_head, "send_head");
    return out;
  }
};

class HTBuffer {
 public:
  HTBuffer(int rank, int num_ranks, int64_t num_bytes)
      : rt_(std::make_shared<rt::HTBuffer>(rank, num_ranks, num_bytes, c10::cuda::current_device())) {}

  py::bytes local_info() const { return to_py_bytes(rt_->local_info()); }
  void connect(const std::vector<std::string>& infos) {
    const std::vector<std::vector<uint8_t>> v = from_py_records(infos);
    rt_->connect(v);
  }
  std::string describe_paths() const { return rt_->describe_paths(); }
  int64_t num_bytes() const { return rt_->num_bytes(); }
  void check_error() const { rt_->check_error(); }
  void destroy() { rt_->destroy(); }

  py::tuple get_dispatch_layout(const at::Tensor& topk_idx, int64_t num_experts, uintptr_t stream) {
    rt::HTLayoutIn in;
    in.topk_idx = ref(topk_idx, "topk_idx");
    in.num_experts = num_experts;
    const rt::HTLayoutPlan p = rt::validate_ht_layout(in, rt_->info());
    c10::cuda::CUDAGuard guard(rt_->device());
    const auto o = topk_idx.options();
    at::Tensor ntpr = allocate(p.num_tokens_per_rank, o), ntpe = allocate(p.num_tokens_per_expert, o),
               itir = allocate(p.is_token_in_rank, o);
    rt_->get_dispatch_layout(in, p, ref(ntpr, "num_tokens_per_rank"), ref(ntpe, "num_tokens_per_expert"),
                             ref(itir, "is_token_in_rank"), stream_or_current(stream));
    return py::make_tuple(ntpr, ntpe, itir);
  }

  py::tuple dispatch(const at::Tensor& x, const OptT& x_scales, const OptT& topk_idx, const OptT& topk_weights,
                     const OptT& num_tokens_per_rank, const at::Tensor& is_token_in_rank,
                     const OptT& num_tokens_per_expert, int64_t cached_num_recv_tokens, const OptT& cached_rpm,
                     const OptT& cached_cpm, int64_t expert_alignment, int64_t num_worst_tokens, int64_t num_sms,
                     int64_t chunk_send, int64_t chunk_recv, uintptr_t stream) {
    rt::HTDispatchIn in;
    in.x = ref(x, "x");
    in.x_scales = ref(x_scales, "x_scales");
    in.topk_idx = ref(topk_idx, "topk_idx");
    in.topk_weights = ref(topk_weights, "topk_weights");
    in.num_tokens_per_rank = ref(num_tokens_per_rank, "num_tokens_per_rank");
    in.is_token_in_rank = ref(is_token_in_rank, "is_token_in_rank");
    in.num_tokens_per_expert = ref(num_tokens_per_expert, "num_tokens_per_expert");
    in.cached_num_recv_tokens = cached_num_recv_tokens;
    in.cached_rank_prefix_matrix = ref(cached_rpm, "handle rank_prefix_matrix");
    in.cached_channel_prefix_matrix = ref(cached_cpm, "handle channel_prefix_matrix");
    in.expert_alignment = expert_alignment;
    in.num_worst_tokens = num_worst_tokens;
    in.config = config_of(num_sms, chunk_send, chunk_recv);
    const rt::HTDispatchPlan p = rt::validate_ht_dispatch(in, rt_->info());
    c10::cuda::CUDAGuard guard(rt_->device());
    const auto o = x.options();
    const cudaStream_t s = stream_or_current(stream);
    at::Tensor rpm = p.cached ? *cached_rpm : allocate(p.rank_prefix_matrix, o);
    at::Tensor cpm = p.cached ? *cached_cpm : allocate(p.channel_prefix_matrix, o);
    // Releases the GIL while the host waits for the receive counts (other threads may run).
    rt::HTBuffer::Counts counts;
    {
      py::gil_scoped_release nogil;
      counts = rt_->notify(in, p, ref(rpm, "rank_prefix_matrix"), ref(cpm, "channel_prefix_matrix"), s);
    }
    const DispatchOutputs r(rt::ht_dispatch_outputs(p, counts.num_recv, rt_->info()), o);
    rt_->dispatch(in, p, counts.num_recv, ref(rpm, "rank_prefix_matrix"), ref(cpm, "channel_prefix_matrix"), r.refs(),
                  s);
    py::list per_expert;
    for (int v : counts.per_expert) per_expert.append(v);
    return py::make_tuple(r.recv_x, or_none(r.recv_scales), or_none(r.recv_topk_idx), or_none(r.recv_topk_weights),
                          per_expert, rpm, cpm, r.rcpm, r.recv_src_idx, r.send_head);
  }

  py::tuple combine(const at::Tensor& x, const OptT& topk_weights, const OptT& bias0, const OptT& bias1,
                    const at::Tensor& src_idx, const at::Tensor& rpm, const at::Tensor& rcpm,
                    const at::Tensor& send_head, int64_t num_sms, int64_t chunk_send, int64_t chunk_recv,
                    uintptr_t stream) {
    rt::HTCombineIn in;
    in.x = ref(x, "x");
    in.topk_weights = ref(topk_weights, "topk_weights");
    in.bias0 = ref(bias0, "bias[0]");
    in.bias1 = ref(bias1, "bias[1]");
    in.src_idx = ref(src_idx, "handle recv_src_idx");
    in.rank_prefix_matrix = ref(rpm, "handle rank_prefix_matrix");
    in.recv_channel_prefix_matrix = ref(rcpm, "handle recv_channel_prefix_matrix");
    in.send_head = ref(send_head, "handle send_head");
    in.config = config_of(num_sms, chunk_send, chunk_recv);
    const rt::HTCombinePlan p = rt::validate_ht_combine(in, rt_->info());
    c10::cuda::CUDAGuard guard(rt_->device());
    const auto o = x.options();
    at::Tensor out = allocate(p.out, o);
    at::Tensor out_w = maybe_allocate(p.out_weights, o);
    rt_->combine(in, p, ref(out, "combined_x"), ref(out_w, "combined_topk_weights"), stream_or_current(stream));
    return py::make_tuple(out, or_none(out_w));
  }

 private:
  std::shared_ptr<rt::HTBuffer> rt_;
};

// One internode pass: its tables (torch tensors, kept by the Python handle for combine and a
// cached dispatch) and what its routing found.
class InternodePass {
 public:
  rt::HTInternodeRoute route;
  at::Tensor pos, send_rows, recv_rows, topk_node, ntpr, ntpe, itir, rpm, cpm, rcpm, send_head, src_idx;

  rt::HTInternodeTables tables() const {
    rt::HTInternodeTables t;
    t.pos = ref(pos, "pos");
    t.send_rows = ref(send_rows, "send_rows");
    t.recv_rows = ref(recv_rows, "recv_rows");
    t.topk_node = ref(topk_node, "topk_node");
    t.ntpr = ref(ntpr, "ntpr");
    t.ntpe = ref(ntpe, "ntpe");
    t.itir = ref(itir, "itir");
    t.rpm = ref(rpm, "rpm");
    t.cpm = ref(cpm, "cpm");
    t.rcpm = ref(rcpm, "rcpm");
    t.send_head = ref(send_head, "send_head");
    t.src_idx = ref(src_idx, "src_idx");
    return t;
  }
  int64_t num_tokens() const { return route.num_tokens; }
  int64_t num_recv() const { return route.num_recv; }
  // The rows this rank sent to / got from each node (device int64 [nodes]).
  at::Tensor rows_sent() const { return send_rows; }
  at::Tensor rows_received() const { return recv_rows; }
};

// The internode path (runtime/ht/internode.h): the rail exchange through the proxy and the node's
// intranode buffer, composed in C++; torch allocates every table and output here.
class HTInternode {
 public:
  HTInternode(int rank, int num_ranks, int ranks_per_node, int64_t nvl_bytes, int64_t rdma_bytes)
      : rt_(std::make_shared<rt::HTInternode>(rank, num_ranks, ranks_per_node, nvl_bytes, rdma_bytes,
                                              c10::cuda::current_device())),
        rank_(rank),
        num_ranks_(num_ranks) {}

  py::bytes local_info() const { return to_py_bytes(rt_->local_info()); }
  void connect(const std::vector<std::string>& infos, py::object allgather) {
    const std::vector<std::vector<uint8_t>> v = from_py_records(infos);
    const auto boot = make_py_bootstrap(rank_, num_ranks_, std::move(allgather));
    rt_->connect(v, *boot);
  }
  std::string describe_paths() const { return rt_->describe_paths(); }
  int nodes() const { return rt_->nodes(); }
  int ranks_per_node() const { return rt_->ranks_per_node(); }
  void check_error() const { rt_->check_error(); }
  void destroy() { rt_->destroy(); }

  py::tuple dispatch(const at::Tensor& x, const OptT& x_scales, const at::Tensor& topk_idx, const OptT& topk_weights,
                     int64_t num_experts, int64_t expert_alignment, int64_t num_worst_tokens, int64_t num_sms,
                     int64_t chunk_send, int64_t chunk_recv, uintptr_t stream) {
    const rt::TensorRef xr = ref(x, "x"), sr = ref(x_scales, "x_scales"), ir = ref(topk_idx, "topk_idx");
    const rt::HTInternodeRows rows = rt::ht_internode_rows(xr, sr, ir);  // the shapes the tables are sized by
    const rt::HTConfig config = config_of(num_sms, chunk_send, chunk_recv);
    c10::cuda::CUDAGuard guard(rt_->device());
    const cudaStream_t s = stream_or_current(stream);
    const int64_t N = xr.shape[0], K = ir.shape[1], nodes = rt_->nodes(), k = rt_->ranks_per_node();
    const auto o = x.options();
    const auto i32 = o.dtype(at::kInt), i64 = o.dtype(at::kLong);
    // Absent weights travel as zeros (the node stage needs a weight per slot); returned as None.
    const at::Tensor weights = topk_weights ? *topk_weights : at::zeros({N, K}, o.dtype(at::kFloat));
    auto pass = std::make_shared<InternodePass>();
    pass->pos = at::empty({nodes, N}, i32);
    pass->send_rows = at::empty({nodes}, i64);
    pass->recv_rows = at::empty({nodes}, i64);
    rt::HTInternodeCounts counts;
    {
      py::gil_scoped_release nogil;  // the host waits for the rail peers' counts
      counts = rt_->route_send(ir, num_experts, rows, pass->tables(), s);
    }
    // The node stage's tables, sized now that the forwarded rows are known.
    const int64_t m1 = counts.forward_rows;
    const int64_t channels = rt::ht_internode_node_channels(rows, K, static_cast<int>(k), config);
    pass->topk_node = at::empty({m1, K}, i64);
    pass->ntpr = at::empty({k}, i32);
    pass->ntpe = at::empty({num_experts / num_ranks_ * k}, i32);
    pass->itir = at::empty({m1, k}, o.dtype(at::kBool));
    pass->rpm = at::empty({k, k}, i32);
    pass->cpm = at::empty({k, channels}, i32);
    {
      py::gil_scoped_release nogil;  // the host waits for the node's counts
      pass->route = rt_->route_finish(counts, pass->tables(), config, expert_alignment, num_worst_tokens, s);
    }
    // The node dispatch fills the pass's rcpm, recv_src_idx and send_head (combine's tables).
    const DispatchOutputs r(rt::ht_dispatch_outputs(pass->route.node_plan, pass->route.num_recv, rt_->node_info()), o);
    pass->rcpm = r.rcpm;
    pass->src_idx = r.recv_src_idx;
    pass->send_head = r.send_head;
    rt_->dispatch(pass->route, pass->tables(), xr, sr, ref(weights, "topk_weights"), r.refs(), s);
    py::list per_expert;
    for (int v : pass->route.per_expert) per_expert.append(v);
    const py::object recv_w = topk_weights ? or_none(r.recv_topk_weights) : py::object(py::none());
    return py::make_tuple(r.recv_x, or_none(r.recv_scales), r.recv_topk_idx, recv_w, per_expert, pass);
  }

  py::tuple cached_dispatch(const at::Tensor& x, const OptT& x_scales, const std::shared_ptr<InternodePass>& pass,
                            uintptr_t stream) {
    c10::cuda::CUDAGuard guard(rt_->device());
    const auto o = x.options();
    const rt::HTInternodeRoute& r = pass->route;
    // x may have another dtype than the handle's dispatch (FP8 with scales, or BF16), as in DeepEP.
    at::Tensor recv_x = at::empty({r.num_recv, x.dim() == 2 ? x.size(1) : 0}, o);
    at::Tensor recv_scales;
    if (x_scales && x_scales->dim() == 2) recv_scales = at::empty({r.num_recv, x_scales->size(1)}, x_scales->options());
    rt_->cached_dispatch(r, pass->tables(), ref(x, "x"), ref(x_scales, "x_scales"), ref(recv_x, "recv_x"),
                         ref(recv_scales, "recv_x_scales"), stream_or_current(stream));
    return py::make_tuple(recv_x, or_none(recv_scales));
  }

  py::tuple combine(const at::Tensor& x, const OptT& topk_weights, const OptT& bias0, const OptT& bias1,
                    const std::shared_ptr<InternodePass>& pass, int64_t num_sms, int64_t chunk_send, int64_t chunk_recv,
                    uintptr_t stream) {
    c10::cuda::CUDAGuard guard(rt_->device());
    const auto o = x.options();
    const rt::HTInternodeRoute& r = pass->route;
    at::Tensor out = at::empty({r.num_tokens, r.rows.hidden}, o.dtype(at::kBFloat16));
    at::Tensor out_w;
    if (topk_weights) out_w = at::empty({r.num_tokens, r.num_topk}, o.dtype(at::kFloat));
    rt_->combine(r, pass->tables(), ref(x, "x"), ref(topk_weights, "topk_weights"), ref(bias0, "bias[0]"),
                 ref(bias1, "bias[1]"), config_of(num_sms, chunk_send, chunk_recv), ref(out, "combined_x"),
                 ref(out_w, "combined_topk_weights"), stream_or_current(stream));
    return py::make_tuple(out, or_none(out_w));
  }

 private:
  std::shared_ptr<rt::HTInternode> rt_;
  int rank_, num_ranks_;
};

}  // namespace

void register_ht(py::module_& m) {
  m.def("host_identity", &anyep::host_identity);
  m.def(
      "ht_ranks_per_node",
      [](const std::vector<std::string>& ids) {
        return rt::ht_ranks_per_node(ids, static_cast<int>(env::get_count("ANYEP_HT_RANKS_PER_NODE")));
      },
      py::arg("host_ids"));
  py::class_<InternodePass, std::shared_ptr<InternodePass>>(m, "InternodePass")
      .def("num_tokens", &InternodePass::num_tokens)
      .def("num_recv", &InternodePass::num_recv)
      .def("rows_sent", &InternodePass::rows_sent)
      .def("rows_received", &InternodePass::rows_received);
  py::class_<HTInternode>(m, "HTInternode")
      .def(py::init<int, int, int, int64_t, int64_t>(), py::arg("rank"), py::arg("num_ranks"),
           py::arg("ranks_per_node"), py::arg("nvl_bytes"), py::arg("rdma_bytes"))
      .def("local_info", &HTInternode::local_info)
      .def("connect", &HTInternode::connect, py::arg("infos"), py::arg("allgather"))
      .def("describe_paths", &HTInternode::describe_paths)
      .def("nodes", &HTInternode::nodes)
      .def("ranks_per_node", &HTInternode::ranks_per_node)
      .def("check_error", &HTInternode::check_error)
      .def("destroy", &HTInternode::destroy)
      .def("dispatch", &HTInternode::dispatch, py::arg("x"), py::arg("x_scales"), py::arg("topk_idx"),
           py::arg("topk_weights"), py::arg("num_experts"), py::arg("expert_alignment"), py::arg("num_worst_tokens"),
           py::arg("num_sms"), py::arg("num_max_nvl_chunked_send_tokens"), py::arg("num_max_nvl_chunked_recv_tokens"),
           py::arg("stream") = 0)
      .def("cached_dispatch", &HTInternode::cached_dispatch, py::arg("x"), py::arg("x_scales"), py::arg("handle"),
           py::arg("stream") = 0)
      .def("combine", &HTInternode::combine, py::arg("x"), py::arg("topk_weights"), py::arg("bias_0"),
           py::arg("bias_1"), py::arg("handle"), py::arg("num_sms"), py::arg("num_max_nvl_chunked_send_tokens"),
           py::arg("num_max_nvl_chunked_recv_tokens"), py::arg("stream") = 0);
  m.def("ht_size_hint", &rt::ht_size_hint, py::arg("hidden_bytes"), py::arg("num_ranks"), py::arg("num_sms"),
        py::arg("num_max_nvl_chunked_recv_tokens"));
  py::class_<HTBuffer>(m, "HTBuffer")
      .def(py::init<int, int, int64_t>(), py::arg("rank"), py::arg("num_ranks"), py::arg("num_bytes"))
      .def("local_info", &HTBuffer::local_info)
      .def("connect", &HTBuffer::connect, py::arg("infos"))
      .def("describe_paths", &HTBuffer::describe_paths)
      .def("num_bytes", &HTBuffer::num_bytes)
      .def("check_error", &HTBuffer::check_error)
      .def("destroy", &HTBuffer::destroy)
      .def("get_dispatch_layout", &HTBuffer::get_dispatch_layout, py::arg("topk_idx"), py::arg("num_experts"),
           py::arg("stream") = 0)
      .def("dispatch", &HTBuffer::dispatch, py::arg("x"), py::arg("x_scales"), py::arg("topk_idx"),
           py::arg("topk_weights"), py::arg("num_tokens_per_rank"), py::arg("is_token_in_rank"),
           py::arg("num_tokens_per_expert"), py::arg("cached_num_recv_tokens"), py::arg("cached_rank_prefix_matrix"),
           py::arg("cached_channel_prefix_matrix"), py::arg("expert_alignment"), py::arg("num_worst_tokens"),
           py::arg("num_sms"), py::arg("num_max_nvl_chunked_send_tokens"), py::arg("num_max_nvl_chunked_recv_tokens"),
           py::arg("stream") = 0)
      .def("combine", &HTBuffer::combine, py::arg("x"), py::arg("topk_weights"), py::arg("bias_0"), py::arg("bias_1"),
           py::arg("src_idx"), py::arg("rank_prefix_matrix"), py::arg("recv_channel_prefix_matrix"),
           py::arg("send_head"), py::arg("num_sms"), py::arg("num_max_nvl_chunked_send_tokens"),
           py::arg("num_max_nvl_chunked_recv_tokens"), py::arg("stream") = 0);
}

}  // namespace anyep::ext
