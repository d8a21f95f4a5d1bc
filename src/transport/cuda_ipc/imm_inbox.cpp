#include "transport/cuda_ipc/imm_inbox.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace anyep::transport::cuda_ipc {

namespace {
std::string sys_error(const std::string& what, const std::string& name) {
  return "cuda-ipc inbox '" + name + "': " + what + ": " + std::strerror(errno);
}
bool power_of_two(uint32_t v) { return v && !(v & (v - 1)); }
}  // namespace

ImmInbox ImmInbox::create(const std::string& name, uint32_t num_ranks, uint32_t slots) {
  if (!power_of_two(slots))
    throw InvalidArgument("cuda-ipc inbox: slots must be a power of two (got " + std::to_string(slots) + ")");
  if (name.empty() || name.size() >= kShmNameBytes || name[0] != '/')
    throw InvalidArgument("cuda-ipc inbox: bad shm name '" + name + "'");
  ImmInbox in;
  in.name_ = name;
  in.num_ranks_ = num_ranks;
  in.slots_ = slots;
  in.bytes_ = inbox_bytes(num_ranks, slots);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw TransportError(sys_error("shm_open(O_CREAT|O_EXCL)", name));
  in.owner_ = true;  // from here on reset() unlinks it
  if (ftruncate(fd, static_cast<off_t>(in.bytes_)) != 0) {
    std::string msg = sys_error("ftruncate to " + std::to_string(in.bytes_) + " bytes", name);
    close(fd);
    in.reset();
    throw TransportError(msg);
  }
  void* p = mmap(nullptr, in.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    std::string msg = sys_error("mmap", name);
    in.reset();
    throw TransportError(msg);
  }
  in.base_ = static_cast<uint8_t*>(p);  // ftruncate zero-fills: every head and tail starts at 0
  auto* h = reinterpret_cast<InboxHeader*>(in.base_);
  h->version = kWireVersion;
  h->num_ranks = num_ranks;
  h->slots = slots;
  // Release: a peer that reads the magic with acquire sees the rest of the header.
  __atomic_store_n(&h->magic, kInboxMagic, __ATOMIC_RELEASE);
  return in;
}

ImmInbox ImmInbox::attach(const std::string& name, uint32_t num_ranks, uint32_t slots) {
  ImmInbox in;
  in.name_ = name;
  in.num_ranks_ = num_ranks;
  in.slots_ = slots;
  in.bytes_ = inbox_bytes(num_ranks, slots);
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw TransportError(sys_error("shm_open (is the peer on this host and still alive?)", name));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != in.bytes_) {
    close(fd);
    throw TransportError("cuda-ipc inbox '" + name + "': size " + std::to_string(st.st_size) + " bytes, expected " +
                         std::to_string(in.bytes_) + " (peer built for another job size?)");
  }
  void* p = mmap(nullptr, in.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw TransportError(sys_error("mmap", name));
  in.base_ = static_cast<uint8_t*>(p);
  auto* h = reinterpret_cast<InboxHeader*>(in.base_);
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kInboxMagic || h->version != kWireVersion ||
      h->num_ranks != num_ranks || h->slots != slots) {
    in.reset();
    throw TransportError("cuda-ipc inbox '" + name +
                         "': header does not match the peer's address (magic/version/ranks/slots)");
  }
  return in;
}

ImmInbox& ImmInbox::operator=(ImmInbox&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = o.base_;
    bytes_ = o.bytes_;
    num_ranks_ = o.num_ranks_;
    slots_ = o.slots_;
    next_src_ = o.next_src_;
    owner_ = o.owner_;
    name_ = std::move(o.name_);
    o.base_ = nullptr;
    o.owner_ = false;
  }
  return *this;
}

void ImmInbox::reset() {
  if (base_) munmap(base_, bytes_);
  if (owner_) shm_unlink(name_.c_str());
  base_ = nullptr;
  owner_ = false;
}

RingIndices* ImmInbox::indices(uint32_t src) const {
  return reinterpret_cast<RingIndices*>(base_ + ring_offset(src, slots_));
}
uint32_t* ImmInbox::slot_array(uint32_t src) const {
  return reinterpret_cast<uint32_t*>(base_ + ring_offset(src, slots_) + sizeof(RingIndices));
}

bool ImmInbox::push(uint32_t src, uint32_t imm) {
  RingIndices* r = indices(src);
  // Only this producer writes head: a relaxed read of our own value is enough.
  uint64_t head = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
  // Acquire on tail: the consumer finished reading a slot before it released that tail value,
  // so overwriting the slot now cannot race with its read.
  uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
  if (head - tail >= slots_) return false;
  slot_array(src)[head & (slots_ - 1)] = imm;
  // Release on head: the slot (and, through the caller, the completed copy) is visible first.
  __atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
  return true;
}

size_t ImmInbox::drain(ImmEvent* out, size_t max) {
  size_t n = 0;
  for (uint32_t k = 0; k < num_ranks_ && n < max; ++k) {
    uint32_t src = (next_src_ + k) % num_ranks_;
    RingIndices* r = indices(src);
    uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);  // only we write tail
    // Acquire on head: pairs with the producer's release, so the slots below hold their values.
    uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    uint64_t take = head - tail;
    if (take > max - n) take = max - n;
    const uint32_t* s = slot_array(src);
    for (uint64_t i = 0; i < take; ++i) out[n++] = ImmEvent{src, s[(tail + i) & (slots_ - 1)]};
    // Release on tail: our slot reads happen before the producer may reuse the slots.
    if (take) __atomic_store_n(&r->tail, tail + take, __ATOMIC_RELEASE);
  }
  next_src_ = (next_src_ + 1) % (num_ranks_ ? num_ranks_ : 1);
  return n;
}

}  // namespace anyep::transport::cuda_ipc
