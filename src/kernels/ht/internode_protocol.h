// anyep/src/kernels/ht/internode_protocol.h — the bookkeeping of high-throughput traffic between
// nodes, in one header for the GPU kernels and the CPU (as channel/ring.h is): which nodes a
// token crosses to and which GPUs there it is forwarded to, the chunk rings a sender fills on its
// rail peer, and the tail signal that publishes a chunk. The CPU workload (bench/kit/workload.cpp,
// "HT stream") drives the ring and the signal through the real channel, proxy and transport, so
// the rules below are proven without a GPU (tests/unit/kernels/test_ht_internode_protocol.cpp,
// tests/unit/proxy/test_proxy_random.cpp, tests/mp/proxy/test_proxy_mp.cpp).
//
// Topology: rank r is local index r % k of node r / k (k ranks per node). A token crosses the
// network once per destination node, to the rank with the same local index there (its rail peer:
// same NIC rail), which forwards it over direct stores to every GPU of that node that hosts one of
// its top-k experts; combine retraces the path (reduce inside the node, one return trip).
//
// Chunk ring of one stream (sender -> rail peer, one channel): `slots` chunk slots in the
// receiver's buffer; `sent` and `freed` are 64-bit running totals that never reset (a total wraps
// after 2^64 chunks: never). The sender may write chunk `seq` once freed >= seq - slots + 1, i.e.
// the receiver has consumed the chunk that last used its slot; the receiver returns `freed` to
// the sender as a signal (credits).
#pragma once

#include <cstdint>

#include "channel/transfer_cmd.h"
#include "common/portability.h"

namespace anyep::ht::internode {

inline constexpr int kMaxNodes = 64;         // a bit per node in a token's node mask
inline constexpr int kMaxRanksPerNode = 32;  // a bit per local rank in a forward mask

struct Topology {
  int ranks_per_node = 1;

  ANYEP_HD ANYEP_INLINE int node(int rank) const { return rank / ranks_per_node; }
  ANYEP_HD ANYEP_INLINE int local(int rank) const { return rank % ranks_per_node; }
  // The rank of node `n` that rank `rank` exchanges network traffic with: same local index.
  ANYEP_HD ANYEP_INLINE int rail_peer(int rank, int n) const { return n * ranks_per_node + local(rank); }
};

// Nodes token `topk[0..k)` must reach (bit n: node n), given `experts_per_rank` experts per rank;
// negative expert ids (masked slots) are skipped. A node appears once however many of its
// experts the token picked: that is the dedup across a node.
ANYEP_HD ANYEP_INLINE uint64_t token_nodes(const int64_t* topk, int k, int experts_per_rank, const Topology& t) {
  uint64_t m = 0;
  for (int j = 0; j < k; ++j)
    if (topk[j] >= 0) m |= 1ull << t.node(static_cast<int>(topk[j] / experts_per_rank));
  return m;
}

// The forward list of the token on node `n`: bit i for local rank i of that node when the token
// picked one of its experts (its rail peer forwards it there; the bit of the rail peer itself
// means a local copy).
ANYEP_HD ANYEP_INLINE uint32_t token_forward(const int64_t* topk, int k, int experts_per_rank, const Topology& t,
                                             int n) {
  uint32_t m = 0;
  for (int j = 0; j < k; ++j) {
    if (topk[j] < 0) continue;
    const int owner = static_cast<int>(topk[j] / experts_per_rank);
    if (t.node(owner) == n) m |= 1u << t.local(owner);
  }
  return m;
}

struct ChunkRing {
  uint32_t slots = 1;

  ANYEP_HD ANYEP_INLINE uint32_t slot(uint64_t seq) const { return static_cast<uint32_t>(seq % slots); }
  // Chunks the receiver must have freed before chunk `seq` may be written.
  ANYEP_HD ANYEP_INLINE uint64_t freed_needed(uint64_t seq) const { return seq >= slots ? seq - slots + 1 : 0; }
  ANYEP_HD ANYEP_INLINE bool may_write(uint64_t seq, uint64_t freed) const { return freed >= freed_needed(seq); }
  // A tail the receiver reads is impossible when it runs ahead of what the sender could have
  // written given what the receiver freed: a duplicated signal (checked by the receiver).
  ANYEP_HD ANYEP_INLINE bool tail_possible(uint64_t tail, uint64_t consumed, uint64_t total) const {
    return tail <= total && tail <= consumed + slots;
  }
};

// The signal that publishes one more chunk of stream `counter` to `dst`: it adds 1 to the tail
// counter there. Memory ordering: it carries the HT partial-order fence (kFenceOrdered) on the
// stream's tag (its channel), so the proxy applies it only after every WRITE pushed before it on
// that (dst, tag) has landed, on transports that reorder (libfabric EFA/SRD, chaos). Without the
// fence a receiver can see the tail before the bytes (the negative control in the tests).
ANYEP_HD ANYEP_INLINE channel::TransferCmd tail_signal(uint32_t dst, uint32_t counter, uint32_t tag,
                                                       bool fenced = true) {
  return channel::make_signal(dst, counter, 1, fenced ? channel::cmd::kFenceOrdered : uint8_t{0}, tag);
}

// The credit return: the receiver adds the chunks it consumed to the sender's freed counter. No
// fence: it publishes no data, and the sender only reuses slots the receiver has finished reading.
ANYEP_HD ANYEP_INLINE channel::TransferCmd credit_signal(uint32_t dst, uint32_t counter, uint32_t chunks) {
  return channel::make_signal(dst, counter, static_cast<int32_t>(chunks));
}

// ---- The rail exchange (what the internode HT path runs today) ---------------------------------
// One exchange moves a block of rows from every rank to its rail peer on every other node, over
// the proxy: dispatch sends each node the rows of the tokens it needs (once per node), combine
// sends the node-reduced rows back. It is the chunk ring above with one slot per (source, call):
//  - the sender waits until its rail peer freed the previous call's block (the credit counter
//    reaches seq - 1: ChunkRing{1}.may_write), so its send area and the peer's receive block are
//    free; then the kernel writes the block's header and pushes the block's WRITEs and one tail
//    signal fenced after them (tail_signal), on the tag of the destination;
//  - the receiver waits until the tail counter of each source reaches seq, reads the header (rows
//    and seq, checked), copies the rows out, then returns one credit (credit_signal).
// Counters are 64-bit running totals in the proxy's host memory: never reset, so no reset can
// race a late signal. Region (symmetric, `bytes` per rank): [0, kExchangeHeadOff) unused control
// space, then the send area (one block per destination node) and the receive area (one block per
// source node), each block kBlockHeaderBytes of header followed by rows.
inline constexpr uint64_t kExchangeHeadOff = 4096;
inline constexpr uint64_t kBlockHeaderBytes = 16;  // int64 rows, uint64 seq

struct BlockHeader {
  int64_t rows;
  uint64_t seq;
};
static_assert(sizeof(BlockHeader) == kBlockHeaderBytes, "block header is 16 bytes");

struct Exchange {
  uint64_t bytes = 0;  // the region, per rank
  int nodes = 1;

  // Bytes of one block (header included), 16-byte aligned; 0 when the region is too small.
  ANYEP_HD ANYEP_INLINE uint64_t block_bytes() const {
    if (bytes <= kExchangeHeadOff || nodes < 1) return 0;
    return ((bytes - kExchangeHeadOff) / (2ull * uint64_t(nodes))) & ~uint64_t{15};
  }
  // Rows of `row_bytes` one block holds.
  ANYEP_HD ANYEP_INLINE int64_t row_capacity(uint64_t row_bytes) const {
    const uint64_t b = block_bytes();
    return b > kBlockHeaderBytes && row_bytes > 0 ? int64_t((b - kBlockHeaderBytes) / row_bytes) : 0;
  }
  // The block this rank sends to node n (send area) and the block node n's rail peer writes here.
  ANYEP_HD ANYEP_INLINE uint64_t send_off(int n) const { return kExchangeHeadOff + uint64_t(n) * block_bytes(); }
  ANYEP_HD ANYEP_INLINE uint64_t recv_off(int n) const {
    return kExchangeHeadOff + (uint64_t(nodes) + uint64_t(n)) * block_bytes();
  }
  // The region a given block size and node count needs (the inverse of block_bytes).
  ANYEP_HD ANYEP_INLINE static uint64_t region_bytes(uint64_t rows, uint64_t row_bytes, int nodes) {
    const uint64_t block = (kBlockHeaderBytes + rows * row_bytes + 15) & ~uint64_t{15};
    return kExchangeHeadOff + 2ull * uint64_t(nodes) * block;
  }
};

// Counters of the exchange (indices into the proxy's counter array, R ranks): the tail of the
// blocks rank `src` sent here, and the credits rank `dst` returned here.
ANYEP_HD ANYEP_INLINE uint32_t tail_counter(int src) { return static_cast<uint32_t>(src); }
ANYEP_HD ANYEP_INLINE uint32_t credit_counter(int R, int dst) { return static_cast<uint32_t>(R + dst); }
ANYEP_HD ANYEP_INLINE uint32_t exchange_counters(int R) { return static_cast<uint32_t>(2 * R); }

}  // namespace anyep::ht::internode
