// anyep/tests/gpu/transport/cuda_ipc_peer.cpp — one rank of the multi-process cuda-ipc tests,
// spawned by test_cuda_ipc: it joins the launcher's shm board, runs the all-to-all exchange and
// writes its result (empty = success) back to the board.
//
//   cuda_ipc_peer <board> <rank> <device> <seed> <writes_per_peer> <max_len> <imm_slots> <max_outstanding>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "alltoall.h"
#include "common/cuda_check.h"
#include "common/gpu_runtime.h"
#include "testkit/shm_board.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"

using namespace anyep;

namespace {
std::string run(testkit::Board& board, uint32_t rank, int device, const test::AllToAllConfig& cfg, uint32_t imm_slots,
                uint32_t max_outstanding) {
  const uint32_t n = board.num_ranks();
  // CUDA failures throw CudaError: main() reports them as this rank's result.
  cuda_check(cudaSetDevice(device), "cuda_ipc_peer", "cudaSetDevice");
  // Regions start inside their allocations, so the descriptor's offset is exercised through IPC.
  constexpr size_t kLead = 4096;
  uint8_t *send_alloc = nullptr, *recv_alloc = nullptr;
  cuda_check(cudaMalloc(&send_alloc, kLead + test::send_bytes(cfg)), "cuda_ipc_peer", "cudaMalloc send");
  cuda_check(cudaMalloc(&recv_alloc, kLead + test::recv_bytes(cfg, n)), "cuda_ipc_peer", "cudaMalloc recv");
  uint8_t *send = send_alloc + kLead, *recv = recv_alloc + kLead;
  test::fill_buffers(rank, cfg, n, send, recv);
  std::string err;
  {
    transport::cuda_ipc::CudaIpcConfig o;
    o.rank = rank;
    o.num_ranks = n;
    o.device = device;
    o.imm_slots = imm_slots;
    o.max_outstanding = max_outstanding;
    auto t = transport::cuda_ipc::make_endpoint(o);
    transport::MrId send_mr = t->register_memory(send, test::send_bytes(cfg), transport::MemKind::kCuda);
    transport::MrId recv_mr = t->register_memory(recv, test::recv_bytes(cfg, n), transport::MemKind::kCuda);
    // The library's own setup path (connect_all) over a bootstrap whose allgather is the board;
    // its first allgather also tells every rank that every buffer is filled.
    uint32_t round = 0;
    auto boot = transport::make_callback_bootstrap(
        rank, n, [&](const std::vector<uint8_t>& mine) { return board.allgather(rank, round++, mine); });
    transport::connect_all(*t, *boot, {send_mr, recv_mr});
    err = test::run_alltoall(*t, cfg, send_mr, recv_mr, recv, [&] { return board.peer_failure(rank); });
    if (err.empty()) err = test::check_recv_buffer(rank, n, cfg, recv);
    if (!err.empty()) return err;  // peers notice through the board and stop waiting
    board.barrier(rank);           // nobody writes any more: close mappings
    t.reset();
    board.barrier(rank);  // nobody has our memory mapped any more: free it
  }
  cudaFree(send_alloc);
  cudaFree(recv_alloc);
  return err;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s board rank device seed writes_per_peer max_len imm_slots max_outstanding\n",
                 argv[0]);
    return 2;
  }
  uint32_t rank = static_cast<uint32_t>(std::atoi(argv[2]));
  try {
    testkit::Board board = testkit::Board::attach(argv[1]);
    std::string err;
    try {
      test::AllToAllConfig cfg;
      cfg.seed = std::strtoull(argv[4], nullptr, 0);
      cfg.writes_per_peer = static_cast<uint32_t>(std::atoi(argv[5]));
      cfg.max_len = std::strtoull(argv[6], nullptr, 0);
      err = run(board, rank, std::atoi(argv[3]), cfg, static_cast<uint32_t>(std::atoi(argv[7])),
                static_cast<uint32_t>(std::atoi(argv[8])));
    } catch (const std::exception& e) {
      err = std::string("rank ") + std::to_string(rank) + ": " + e.what();
    }
    board.report(rank, err);
    if (!err.empty()) std::fprintf(stderr, "%s\n", err.c_str());
    return err.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %u: %s\n", rank, e.what());
    return 1;
  }
}
