// anyep/emunic/wire.h — the wire between two emulated NICs: each endpoint owns one POSIX shared
// memory segment of inbound lanes. A lane is a single-producer single-consumer packet ring that one
// peer endpoint claims (by CAS) the first time it sends there; the owner's engine consumes it. Data,
// atomics and acks all travel as packets. Both sides touch a lane only through the atomics below
// (acquire/release on head and tail), so the slots themselves need no locks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace anyep_emunic::wire {

constexpr uint64_t kSegMagic = 0x63696e756d656561ull;  // "aaemunic"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kLanes = 64;         // peers (endpoints) that can send to one endpoint
constexpr uint32_t kSlots = 64;         // packets in flight per lane
constexpr uint32_t kMtu = 8192;         // payload bytes per packet
constexpr size_t kAddrBytes = 96;       // an address string, NUL included
constexpr size_t kMaxAtomicBytes = 64;  // operands of one atomic (count * datatype size)

enum PktType : uint8_t {
  kData = 1,    // one packet of a write
  kAtomic = 2,  // a whole atomic (operands in the payload)
  kAck = 3,     // payload: AckEntry[hdr.count]
};

enum PktFlags : uint8_t {
  kCqData = 1,    // raise a remote CQ entry with cq_data once the whole message is in place
  kFetching = 2,  // atomic: return the old values in the ack
};

struct alignas(64) PktHdr {
  uint8_t type;
  uint8_t flags;
  uint8_t datatype;  // atomics: fi_datatype
  uint8_t op;        // atomics: fi_op
  uint32_t len;      // payload bytes in this packet
  uint64_t msg_id;   // the sender's message id (acks name it)
  uint64_t raddr;    // target address of the whole message
  uint64_t key;
  uint64_t msg_len;    // bytes of the whole message (atomics: count)
  uint64_t offset;     // of this packet within the message
  uint64_t cq_data;    // remote CQ data (kCqData)
  uint32_t pkt_count;  // packets of the message (acks: entries)
  uint32_t pad;
  uint64_t deliver_at_ns;  // steady clock: the receiver applies it no earlier (the link's latency)
};
static_assert(sizeof(PktHdr) == 128, "packet header layout");

struct AckEntry {
  uint64_t msg_id;
  int32_t status;                       // 0 or a negative FI_ error
  uint32_t prov_errno;                  // ErrCode when status != 0
  uint64_t value[kMaxAtomicBytes / 8];  // fetched values (fetching atomics)
};
constexpr uint32_t kAcksPerPkt = kMtu / sizeof(AckEntry);

constexpr size_t kSlotBytes = sizeof(PktHdr) + kMtu;

struct alignas(64) LaneHdr {
  std::atomic<uint32_t> state;  // 0 free, 1 being claimed, 2 in use
  uint32_t owner_pid;
  char owner_addr[kAddrBytes];             // the sender's address (written before state becomes 2)
  alignas(64) std::atomic<uint64_t> head;  // written by the producer
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer
};

struct alignas(64) SegHdr {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;                        // the owner's process id (peer-loss checks: kill(pid, 0))
  std::atomic<uint32_t> closed;        // the owner closed its endpoint
  std::atomic<uint32_t> lanes_used;    // lanes [0, lanes_used) may be in use
  std::atomic<uint64_t> heartbeat_ns;  // the owner's engine stamps it while running
};

constexpr size_t lanes_offset() { return (sizeof(SegHdr) + 4095) & ~size_t{4095}; }
constexpr size_t lane_bytes() { return ((sizeof(LaneHdr) + kSlots * kSlotBytes) + 4095) & ~size_t{4095}; }
constexpr size_t segment_bytes() { return lanes_offset() + kLanes * lane_bytes(); }

inline SegHdr* seg_hdr(void* base) { return static_cast<SegHdr*>(base); }
inline LaneHdr* lane(void* base, uint32_t i) {
  return reinterpret_cast<LaneHdr*>(static_cast<uint8_t*>(base) + lanes_offset() + i * lane_bytes());
}
inline uint8_t* slot(LaneHdr* l, uint64_t index) {
  return reinterpret_cast<uint8_t*>(l) + sizeof(LaneHdr) + (index % kSlots) * kSlotBytes;
}

// Producer side of one lane (the sender's engine keeps one per peer).
struct LaneTx {
  LaneHdr* l = nullptr;
  uint64_t head = 0;         // next index to fill
  uint64_t cached_tail = 0;  // consumer's tail as last read
  // A free slot, or null when the ring is full.
  uint8_t* claim() {
    if (head - cached_tail >= kSlots) {
      cached_tail = l->tail.load(std::memory_order_acquire);
      if (head - cached_tail >= kSlots) return nullptr;
    }
    return slot(l, head);
  }
  void publish() { l->head.store(++head, std::memory_order_release); }
};

// Consumer side of one lane (the owner's engine).
struct LaneRx {
  LaneHdr* l = nullptr;
  uint64_t tail = 0;
  uint64_t cached_head = 0;
  uint8_t* peek() {
    if (tail == cached_head) {
      cached_head = l->head.load(std::memory_order_acquire);
      if (tail == cached_head) return nullptr;
    }
    return slot(l, tail);
  }
  void pop() { l->tail.store(++tail, std::memory_order_release); }
};

}  // namespace anyep_emunic::wire
