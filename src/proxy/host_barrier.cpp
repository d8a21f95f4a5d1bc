#include "proxy/host_barrier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <random>

#include "common/error.h"
#include "common/host_identity.h"
#include "common/read_line.h"

namespace anyep::proxy {

namespace {

constexpr uint64_t kMagic = 0x616e796570687362ull;  // "anyephsb"

struct Header {
  uint64_t magic;
  uint64_t token;
  uint32_t local_size, num_threads;
};
constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(Header) <= kHeaderBytes, "header fits the first cache line");

// Ranks that are threads of one process share one mapping (one address for every rank, which
// also lets ThreadSanitizer see the synchronization); other processes map the segment by name.
std::mutex g_mu;
std::map<std::string, std::weak_ptr<HostShm>>& registry() {
  static std::map<std::string, std::weak_ptr<HostShm>> r;
  return r;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// Every rank contributes its error ("" if none); all throw the first one, so no rank waits for a
// partner that already gave up.
void raise_first(const std::vector<std::vector<uint8_t>>& all, const char* step) {
  for (uint32_t p = 0; p < all.size(); ++p)
    if (!all[p].empty())
      throw InvalidArgument(std::string("proxy: host barrier setup (") + step + ") failed on rank " +
                            std::to_string(p) + ": " + std::string(all[p].begin(), all[p].end()) +
                            " (set ANYEP_PROXY_RANKS_PER_HOST=1 to run barriers over the transport only)");
}

}  // namespace

struct HostShmAccess {
  static std::shared_ptr<HostShm> create(const std::string& name, uint64_t token, uint32_t local_size,
                                         uint32_t threads) {
    const size_t bytes = kHeaderBytes + sizeof(BarrierWord) * static_cast<size_t>(threads) * (local_size + 1);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw InternalError("shm_open(" + name + ", create): " + std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      throw InternalError("ftruncate(" + name + ", " + std::to_string(bytes) + "): " + std::strerror(e));
    }
    auto s = map(name, fd, bytes, local_size);
    // Fresh pages are zero; construct the words explicitly anyway, then publish the header last.
    for (size_t i = 0; i < static_cast<size_t>(threads) * (local_size + 1); ++i) new (&s->words_[i]) BarrierWord();
    Header* h = static_cast<Header*>(s->base_);
    h->token = token;
    h->local_size = local_size;
    h->num_threads = threads;
    // Others open the segment only after a bootstrap round that follows this store.
    h->magic = kMagic;
    return s;
  }

  static std::shared_ptr<HostShm> open(const std::string& name, uint64_t token, uint32_t local_size, uint32_t threads) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0)
      throw InternalError("shm_open(" + name + "): " + std::strerror(errno) +
                          " (is /dev/shm shared by every rank of this host?)");
    struct stat st;
    const size_t bytes = kHeaderBytes + sizeof(BarrierWord) * static_cast<size_t>(threads) * (local_size + 1);
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      close(fd);
      throw InternalError("shared memory " + name + " has the wrong size (ranks disagree on threads or host layout)");
    }
    auto s = map(name, fd, bytes, local_size);
    const Header* h = static_cast<const Header*>(s->base_);
    if (h->magic != kMagic || h->token != token || h->local_size != local_size || h->num_threads != threads)
      throw InternalError("shared memory " + name + " does not belong to this job (header mismatch)");
    return s;
  }

 private:
  static std::shared_ptr<HostShm> map(const std::string& name, int fd, size_t bytes, uint32_t local_size) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    close(fd);  // the mapping keeps the segment alive
    if (p == MAP_FAILED) throw InternalError("mmap(" + name + "): " + std::strerror(e));
    std::shared_ptr<HostShm> s(new HostShm());
    s->name_ = name;
    s->base_ = p;
    s->bytes_ = bytes;
    s->local_size_ = local_size;
    s->words_ = reinterpret_cast<BarrierWord*>(static_cast<uint8_t*>(p) + kHeaderBytes);
    return s;
  }
};

HostShm::~HostShm() {
  if (base_) munmap(base_, bytes_);
}

std::string HostLayout::name(uint32_t r) const {
  return "rank " + std::to_string(r) + " (host " + std::to_string(host_of[r]) + ")";
}

Hosts setup_hosts(transport::Bootstrap& boot, uint32_t ranks_per_host, uint32_t num_threads) {
  const uint32_t n = boot.size(), me = boot.rank();
  // Round 1: layout mode, job token (rank 0's counts), host identity.
  std::random_device rd;
  const uint64_t token = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                         (static_cast<uint64_t>(getpid()) << 20);
  std::vector<uint8_t> mine(12);
  std::memcpy(&mine[0], &ranks_per_host, 4);
  std::memcpy(&mine[4], &token, 8);
  const std::string id = host_identity();
  mine.insert(mine.end(), id.begin(), id.end());
  const auto all = boot.allgather(mine);

  Hosts out;
  HostLayout& hl = out.layout;
  hl.rank = me;
  hl.ranks_per_host = ranks_per_host;
  hl.host_of.resize(n);
  hl.local_index.resize(n);
  std::map<std::string, uint32_t> ids;
  std::vector<uint32_t> fill;
  uint64_t job = 0;
  for (uint32_t p = 0; p < n; ++p) {
    if (all[p].size() < 12) throw InternalError("proxy: host exchange: short record from rank " + std::to_string(p));
    uint32_t rph = 0;
    std::memcpy(&rph, &all[p][0], 4);
    if (p == 0) std::memcpy(&job, &all[p][4], 8);
    if (rph != ranks_per_host)
      throw InvalidArgument("proxy: ranks per host is " + std::to_string(rph) + " on rank " + std::to_string(p) +
                            " but " + std::to_string(ranks_per_host) + " here (ANYEP_PROXY_RANKS_PER_HOST must agree)");
    uint32_t h;
    if (ranks_per_host) {
      h = p / ranks_per_host;
    } else {
      auto [it, added] = ids.emplace(std::string(all[p].begin() + 12, all[p].end()), static_cast<uint32_t>(ids.size()));
      h = it->second;
    }
    if (h >= fill.size()) fill.resize(h + 1, 0);
    if (fill[h] == 0) hl.leader_of_host.resize(h + 1), hl.leader_of_host[h] = p;
    hl.host_of[p] = h;
    hl.local_index[p] = fill[h]++;
  }
  hl.num_hosts = static_cast<uint32_t>(fill.size());
  hl.host = hl.host_of[me];
  for (uint32_t p = 0; p < n; ++p)
    if (hl.host_of[p] == hl.host) hl.local_ranks.push_back(p);

  // Rounds 2-3: the leader creates the segment; then the others map it; then the leader unlinks
  // the name. Every rank takes part in every round, so a failure anywhere is raised everywhere.
  char name[64];
  std::snprintf(name, sizeof(name), "/anyep-%016llx-h%u", static_cast<unsigned long long>(job), hl.host);
  const bool shared = hl.local_size() > 1;
  std::string err;
  if (shared && hl.leader()) {
    try {
      out.shm = HostShmAccess::create(name, job, hl.local_size(), num_threads);
      std::lock_guard<std::mutex> g(g_mu);
      registry()[name] = out.shm;
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  raise_first(boot.allgather(bytes_of(err)), "create");
  if (shared && !hl.leader()) {
    try {
      {
        std::lock_guard<std::mutex> g(g_mu);
        auto it = registry().find(name);
        if (it != registry().end()) out.shm = it->second.lock();
      }
      if (!out.shm) out.shm = HostShmAccess::open(name, job, hl.local_size(), num_threads);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  // Every rank has mapped (or failed): remove the name, the mappings stay.
  const auto mapped = boot.allgather(bytes_of(err));
  if (shared && hl.leader()) {
    shm_unlink(name);
    std::lock_guard<std::mutex> g(g_mu);
    registry().erase(name);
  }
  raise_first(mapped, "map");
  return out;
}

}  // namespace anyep::proxy
