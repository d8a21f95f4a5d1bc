// anyep/python/csrc/ht_ext.cpp — torch bindings for the HT runtime (src/runtime/ht_buffer.h):
// tensors to descriptors, outputs allocated as the runtime specifies them on the current stream,
// calls launched on the given stream. Every argument check lives in the runtime (ht_validate.h).
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
#include "runtime/ht_buffer.h"
#include "runtime/ht_net.h"
#include "runtime/ht_topology.h"
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

class HTBuffer {
 public:
  HTBuffer(int rank, int num_ranks, int64_t num_bytes)
      : rt_(std::make_shared<rt::HTBuffer>(rank, num_ranks, num_bytes, c10::cuda::current_device())) {}

  py::bytes local_info() const {
    const auto v = rt_->local_info();
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
  }
  void connect(const std::vector<std::string>& infos) {
    std::vector<std::vector<uint8_t>> v;
    for (const auto& s : infos) v.emplace_back(s.begin(), s.end());
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
    const rt::HTDispatchOutSpecs spec = rt::ht_dispatch_outputs(p, counts.num_recv, rt_->info());
    at::Tensor recv_x = allocate(spec.recv_x, o);
    at::Tensor recv_scales = maybe_allocate(spec.recv_x_scales, o);
    at::Tensor recv_topk_idx = maybe_allocate(spec.recv_topk_idx, o);
    at::Tensor recv_topk_weights = maybe_allocate(spec.recv_topk_weights, o);
    at::Tensor rcpm = allocate(spec.recv_channel_prefix_matrix, o);
    at::Tensor recv_src_idx = allocate(spec.recv_src_idx, o);
    at::Tensor send_head = allocate(spec.send_head, o);
    rt::HTDispatchOut out;
    out.recv_x = ref(recv_x, "recv_x");
    out.recv_x_scales = ref(recv_scales, "recv_x_scales");
    out.recv_topk_idx = ref(recv_topk_idx, "recv_topk_idx");
    out.recv_topk_weights = ref(recv_topk_weights, "recv_topk_weights");
    out.recv_channel_prefix_matrix = ref(rcpm, "recv_channel_prefix_matrix");
    out.recv_src_idx = ref(recv_src_idx, "recv_src_idx");
    out.send_head = ref(send_head, "send_head");
    rt_->dispatch(in, p, counts.num_recv, ref(rpm, "rank_prefix_matrix"), ref(cpm, "channel_prefix_matrix"), out, s);
    py::list per_expert;
    for (int v : counts.per_expert) per_expert.append(v);
    return py::make_tuple(recv_x, or_none(recv_scales), or_none(recv_topk_idx), or_none(recv_topk_weights), per_expert,
                          rpm, cpm, rcpm, recv_src_idx, send_head);
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

// The internode path's rail exchange (runtime/ht_net.h). Python packs rows into the send area
// (region() views) between begin() and send(); the int64 [nodes] row counts stay on the device.
class HTNet {
 public:
  HTNet(int rank, int num_ranks, int ranks_per_node, int64_t num_bytes)
      : rt_(std::make_shared<rt::HTNet>(rank, num_ranks, ranks_per_node, num_bytes, c10::cuda::current_device())),
        rank_(rank),
        num_ranks_(num_ranks) {}

  void connect(py::object allgather) {
    const auto boot = make_py_bootstrap(rank_, num_ranks_, std::move(allgather));
    rt_->connect(*boot);
  }
  std::string describe_paths() const { return rt_->describe_paths(); }
  int nodes() const { return rt_->nodes(); }
  int ranks_per_node() const { return rt_->ranks_per_node(); }
  bool host_staged() const { return rt_->host_staged(); }
  void check_error() const { rt_->check_error(); }
  void destroy() { rt_->destroy(); }
  // The whole region as uint8 on the buffer's device (a view: valid until destroy()).
  at::Tensor region() const {
    return at::from_blob(rt_->region(), {static_cast<int64_t>(rt_->num_bytes())},
                         at::TensorOptions().dtype(at::kByte).device(at::kCUDA, rt_->device()));
  }
  int64_t block_bytes() const { return static_cast<int64_t>(rt_->exchange().block_bytes()); }
  int64_t send_off(int n) const { return static_cast<int64_t>(rt_->exchange().send_off(n)); }
  int64_t header_bytes() const { return static_cast<int64_t>(ht::internode::kBlockHeaderBytes); }
  void check_fits(int64_t rows, int64_t row_bytes, const std::string& what) const {
    rt_->check_fits(rows, static_cast<uint64_t>(row_bytes), what.c_str());
  }
  void begin(uintptr_t stream) { rt_->begin(stream_or_current(stream)); }
  void send(const at::Tensor& send_rows, const OptT& expect_rows, const at::Tensor& recv_rows, int64_t row_bytes,
            uintptr_t stream) {
    check_rows(send_rows, "send_rows");
    check_rows(recv_rows, "recv_rows");
    if (expect_rows) check_rows(*expect_rows, "expect_rows");
    rt_->send(send_rows.data_ptr<int64_t>(), expect_rows ? expect_rows->data_ptr<int64_t>() : nullptr,
              recv_rows.data_ptr<int64_t>(), static_cast<uint64_t>(row_bytes), stream_or_current(stream));
  }
  void finish(const at::Tensor& recv_rows, const at::Tensor& out, int64_t row_bytes, uintptr_t stream) {
    check_rows(recv_rows, "recv_rows");
    if (out.scalar_type() != at::kByte || !out.is_cuda() || !out.is_contiguous() || out.dim() != 2 ||
        out.size(1) != row_bytes)
      throw InvalidArgument("anyep HT internode: out must be a contiguous CUDA uint8 [rows, " +
                            std::to_string(row_bytes) + "] tensor");
    rt_->finish(recv_rows.data_ptr<int64_t>(), out.data_ptr<uint8_t>(), static_cast<uint64_t>(row_bytes),
                stream_or_current(stream));
  }

 private:
  void check_rows(const at::Tensor& t, const char* name) const {
    if (t.scalar_type() != at::kLong || !t.is_cuda() || !t.is_contiguous() || t.numel() != rt_->nodes())
      throw InvalidArgument(std::string("anyep HT internode: ") + name + " must be a contiguous CUDA int64 tensor of " +
                            std::to_string(rt_->nodes()) + " elements (one per node)");
  }
  std::shared_ptr<rt::HTNet> rt_;
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
  py::class_<HTNet>(m, "HTNet")
      .def(py::init<int, int, int, int64_t>(), py::arg("rank"), py::arg("num_ranks"), py::arg("ranks_per_node"),
           py::arg("num_bytes"))
      .def("connect", &HTNet::connect, py::arg("allgather"))
      .def("describe_paths", &HTNet::describe_paths)
      .def("nodes", &HTNet::nodes)
      .def("ranks_per_node", &HTNet::ranks_per_node)
      .def("host_staged", &HTNet::host_staged)
      .def("check_error", &HTNet::check_error)
      .def("destroy", &HTNet::destroy)
      .def("region", &HTNet::region)
      .def("block_bytes", &HTNet::block_bytes)
      .def("send_off", &HTNet::send_off, py::arg("node"))
      .def("header_bytes", &HTNet::header_bytes)
      .def("check_fits", &HTNet::check_fits, py::arg("rows"), py::arg("row_bytes"), py::arg("what"))
      .def("begin", &HTNet::begin, py::arg("stream") = 0)
      .def("send", &HTNet::send, py::arg("send_rows"), py::arg("expect_rows"), py::arg("recv_rows"),
           py::arg("row_bytes"), py::arg("stream") = 0)
      .def("finish", &HTNet::finish, py::arg("recv_rows"), py::arg("out"), py::arg("row_bytes"), py::arg("stream") = 0);
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
