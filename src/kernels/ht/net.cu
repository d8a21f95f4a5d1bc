// anyep/src/kernels/ht/net.cu — the rail exchange of the internode HT path: one thread per node
// posts the WRITEs and signals of its block through the proxy's rings and waits on the proxy's
// host counters; a grid-stride copy moves the received blocks out. The protocol (credits, tail
// signal, header) is ht/internode_protocol.h's; the proxy and transport below never see a token.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ht/device.cuh"
#include "kernels/ht/internode_protocol.h"

namespace anyep::ht {
namespace {

namespace in = internode;

constexpr int kNetThreads = 64;  // one per node (kMaxNodes)
static_assert(in::kMaxNodes <= kNetThreads, "a thread per node");
constexpr int kCopyBlocks = 32;

// Spin until the 64-bit running total *c reaches `want` (acquire, system scope: the proxy adds to
// it in host memory after the writes it is fenced behind). False on timeout.
__device__ bool wait_total(const unsigned long long* c, uint64_t want, uint64_t timeout_ns) {
  const uint64_t start = port::now_ns();
  while (port::load_acquire_system(reinterpret_cast<const uint64_t*>(c)) < want) {
    if (port::now_ns() - start > timeout_ns) return false;
    port::spin_pause();
  }
  return true;
}

__device__ void push(const NetArgs& a, uint32_t tag, const channel::TransferCmd& cmd, int node, int peer) {
  dev::push_cmd(a.proxy, a.err, a.rank, tag, cmd, node, peer);
}

__global__ void __launch_bounds__(kNetThreads) net_kernel(NetArgs a, NetStep step) {
  const in::Topology t{a.ranks_per_node};
  const in::Exchange ex{a.bytes, a.nodes};
  const int n = static_cast<int>(threadIdx.x), me = t.node(a.rank);
  if (n >= a.nodes) return;
  const int peer = t.rail_peer(a.rank, n);
  // One fence group per destination (the LL proxy's tag count is >= the ranks it serves).
  const uint32_t tag = static_cast<uint32_t>(peer % num_proxy_tags(a.R));
  if (step == NetStep::kWaitCredits) {
    if (n != me && !wait_total(a.proxy.counters + in::credit_counter(a.R, peer), a.seq - 1, a.timeout_ns))
      dev::report(a.err, kErrNetTimeout, a.rank, n, peer, 0);
    return;
  }
  if (step == NetStep::kRelease) {
    if (n != me)
      push(a, tag, in::credit_signal(static_cast<uint32_t>(peer), in::credit_counter(a.R, a.rank), 1), n, peer);
    return;
  }
  // kSend.
  const int64_t rows = a.send_rows[n];
  if (rows < 0 || rows > ex.row_capacity(a.row_bytes)) {
    dev::report(a.err, kErrNetOverflow, a.rank, n, peer, static_cast<int>(rows));
    return;
  }
  if (n == me) {
    a.recv_rows[n] = rows;  // the own node's block stays in the send area
    return;
  }
  in::BlockHeader* h = reinterpret_cast<in::BlockHeader*>(a.local + ex.send_off(n));
  h->rows = rows;
  h->seq = a.seq;
  // The pushes below release-store at system scope: the header (this thread) and the rows (earlier
  // kernels on the stream) are in memory before the proxy reads the command.
  const uint64_t total = in::kBlockHeaderBytes + uint64_t(rows) * a.row_bytes;
  constexpr uint64_t kPiece = channel::cmd::kMaxLength & ~uint64_t{15};
  for (uint64_t off = 0; off < total; off += kPiece) {
    const uint64_t len = total - off < kPiece ? total - off : kPiece;
    push(a, tag,
         channel::make_write(static_cast<uint32_t>(peer), ex.send_off(n) + off, ex.recv_off(me) + off,
                             static_cast<uint32_t>(len), tag, false),
         n, peer);
  }
  // Fenced (kFenceOrdered on the tag): the receiver's proxy applies it after every WRITE above.
  push(a, tag, in::tail_signal(static_cast<uint32_t>(peer), in::tail_counter(a.rank), tag), n, peer);
  // Node n's rail peer sends us its block the same way.
  if (!wait_total(a.proxy.counters + in::tail_counter(peer), a.seq, a.timeout_ns)) {
    dev::report(a.err, kErrNetTimeout, a.rank, n, peer, 1);
    return;
  }
  const in::BlockHeader* r = reinterpret_cast<const in::BlockHeader*>(a.local + ex.recv_off(n));
  const int64_t got = dev::ld_recv(&r->rows, a.host_mem);
  const uint64_t seq = dev::ld_recv(&r->seq, a.host_mem);
  const bool bad = seq != a.seq || got < 0 || got > ex.row_capacity(a.row_bytes) ||
                   (a.expect_rows != nullptr && got != a.expect_rows[n]);
  if (bad) dev::report(a.err, kErrNetHeader, a.rank, n, peer, static_cast<int>(got));
  a.recv_rows[n] = bad ? 0 : got;
}

// Every node's rows into `out`, node by node; 16-byte units, grid-stride.
__global__ void __launch_bounds__(256) copy_out_kernel(NetArgs a) {
  __shared__ int64_t s_first[in::kMaxNodes + 1];
  const in::Exchange ex{a.bytes, a.nodes};
  const int me = in::Topology{a.ranks_per_node}.node(a.rank);
  if (threadIdx.x == 0) {
    s_first[0] = 0;
    for (int n = 0; n < a.nodes; ++n) s_first[n + 1] = s_first[n] + a.recv_rows[n];
  }
  __syncthreads();
  const uint64_t units_per_row = a.row_bytes / 16;
  const uint64_t total = uint64_t(s_first[a.nodes]) * units_per_row;
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < total; u += uint64_t(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(u / units_per_row);
    int n = 0;
    while (s_first[n + 1] <= row) ++n;
    const uint64_t in_block = (uint64_t(row - s_first[n])) * a.row_bytes + (u % units_per_row) * 16;
    const uint8_t* src = a.local + (n == me ? ex.send_off(n) : ex.recv_off(n)) + in::kBlockHeaderBytes + in_block;
    // A NIC wrote host memory behind the GPU's caches, a peer's copy engine device memory (ld_recv).
    const uint4 v = dev::ld_recv(reinterpret_cast<const uint4*>(src), a.host_mem);
    port::store16(a.out + u * 16, v);
  }
}

}  // namespace

cudaError_t launch_net(const NetArgs& a, NetStep step, cudaStream_t stream) {
  if (step == NetStep::kCopyOut) {
    copy_out_kernel<<<kCopyBlocks, 256, 0, stream>>>(a);
  } else {
    net_kernel<<<1, kNetThreads, 0, stream>>>(a, step);
  }
  return cudaGetLastError();
}

cudaError_t preload_net() { return load_functions(net_kernel, copy_out_kernel); }

}  // namespace anyep::ht
