// anyep/testkit/shm_board.h — test-only out-of-band exchange between a launcher and
// the worker processes it spawns (fork+exec, so no CUDA state crosses a fork): a POSIX shm
// segment with an allgather area, a reusable barrier and a result line per rank. Every wait is
// bounded and its timeout names the ranks that did not arrive.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace anyep::testkit {

inline constexpr uint32_t kBoardMaxRanks = 16;
inline constexpr uint32_t kBoardRounds = 8;        // allgather rounds available
inline constexpr uint32_t kBoardBlobBytes = 1024;  // per rank per round
inline constexpr uint32_t kBoardMsgBytes = 1024;   // result line per rank

struct BoardLayout {
  uint32_t num_ranks;
  uint32_t pad;
  uint64_t barrier_arrivals;               // monotonic: barrier k completes at n * k arrivals
  uint64_t round_arrivals[kBoardRounds];   // allgather round r complete at n arrivals
  uint64_t rank_barriers[kBoardMaxRanks];  // barriers each rank has entered (for messages)
  uint32_t blob_size[kBoardRounds][kBoardMaxRanks];
  uint8_t blob[kBoardRounds][kBoardMaxRanks][kBoardBlobBytes];
  int32_t done[kBoardMaxRanks];              // 1: the rank wrote its result
  char msg[kBoardMaxRanks][kBoardMsgBytes];  // "" = success, else what failed
};

class Board {
 public:
  static Board create(const std::string& name, uint32_t num_ranks) {
    if (num_ranks > kBoardMaxRanks) throw std::invalid_argument("board: too many ranks");
    shm_unlink(name.c_str());
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, sizeof(BoardLayout)) != 0) throw std::runtime_error("board: cannot create " + name);
    Board b(fd, name, true);
    b.l_->num_ranks = num_ranks;
    return b;
  }
  static Board attach(const std::string& name) {
    int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) throw std::runtime_error("board: cannot open " + name);
    return Board(fd, name, false);
  }
  Board(Board&& o) noexcept : l_(o.l_), name_(std::move(o.name_)), owner_(o.owner_) {
    o.l_ = nullptr, o.owner_ = false;
  }
  ~Board() {
    if (l_) munmap(l_, sizeof(BoardLayout));
    if (owner_) shm_unlink(name_.c_str());
  }
  BoardLayout* layout() { return l_; }
  uint32_t num_ranks() const { return l_->num_ranks; }

  // Collective, once per round (round < kBoardRounds).
  std::vector<std::vector<uint8_t>> allgather(uint32_t rank, uint32_t round, const std::vector<uint8_t>& mine,
                                              double timeout_s = 60) {
    if (round >= kBoardRounds || mine.size() > kBoardBlobBytes) throw std::invalid_argument("board: bad allgather");
    std::memcpy(l_->blob[round][rank], mine.data(), mine.size());
    l_->blob_size[round][rank] = static_cast<uint32_t>(mine.size());
    // Release: our blob is visible to whoever sees the arrival.
    __atomic_fetch_add(&l_->round_arrivals[round], 1, __ATOMIC_ACQ_REL);
    wait_until(&l_->round_arrivals[round], num_ranks(), timeout_s, "allgather round " + std::to_string(round));
    std::vector<std::vector<uint8_t>> all(num_ranks());
    for (uint32_t r = 0; r < num_ranks(); ++r)
      all[r].assign(l_->blob[round][r], l_->blob[round][r] + l_->blob_size[round][r]);
    return all;
  }

  void barrier(uint32_t rank, double timeout_s = 60) {
    uint64_t k = __atomic_add_fetch(&l_->rank_barriers[rank], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&l_->barrier_arrivals, 1, __ATOMIC_ACQ_REL);
    wait_until(&l_->barrier_arrivals, k * num_ranks(), timeout_s, "barrier " + std::to_string(k), k);
  }

  // The first failure another rank reported ("" if none): lets a rank stop waiting for it.
  std::string peer_failure(uint32_t rank) const {
    for (uint32_t r = 0; r < num_ranks(); ++r)
      if (r != rank && __atomic_load_n(&l_->done[r], __ATOMIC_ACQUIRE) == 1 && l_->msg[r][0]) return l_->msg[r];
    return {};
  }

  void report(uint32_t rank, const std::string& msg) {
    std::snprintf(l_->msg[rank], kBoardMsgBytes, "%s", msg.c_str());
    __atomic_store_n(&l_->done[rank], 1, __ATOMIC_RELEASE);
  }

 private:
  Board(int fd, const std::string& name, bool owner) : name_(name), owner_(owner) {
    void* p = mmap(nullptr, sizeof(BoardLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("board: cannot map " + name);
    l_ = static_cast<BoardLayout*>(p);
  }
  void wait_until(const uint64_t* counter, uint64_t target, double timeout_s, const std::string& what, uint64_t k = 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < target) {
      for (uint32_t r = 0; r < num_ranks(); ++r)  // a rank that failed will never arrive: stop now
        if (__atomic_load_n(&l_->done[r], __ATOMIC_ACQUIRE) == 1 && l_->msg[r][0])
          throw std::runtime_error("board: " + what + " abandoned: rank " + std::to_string(r) + " failed");
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (uint32_t r = 0; r < num_ranks(); ++r)
          if (k && __atomic_load_n(&l_->rank_barriers[r], __ATOMIC_RELAXED) < k) (missing += ' ') += std::to_string(r);
        throw std::runtime_error("board: " + what + " timed out after " + std::to_string(timeout_s) + " s" +
                                 (missing.empty() ? std::string() : "; ranks not arrived:" + missing));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  BoardLayout* l_ = nullptr;
  std::string name_;
  bool owner_ = false;
};

// Spawns `argv_per_rank.size()` processes (fork+exec) and waits for all of them at most
// timeout_s; stragglers are killed. Returns one line per failed rank ("" when all succeeded),
// taking each rank's own message from the board when it left one.
inline std::string spawn_and_wait(const std::vector<std::vector<std::string>>& argv_per_rank, Board& board,
                                  double timeout_s) {
  std::vector<pid_t> pids;
  std::string failures;
  for (size_t r = 0; r < argv_per_rank.size(); ++r) {
    std::vector<char*> argv;
    for (auto& a : argv_per_rank[r]) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      failures += "rank " + std::to_string(r) + ": cannot spawn " + argv_per_rank[r][0] + "\n";
      pid = -1;
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<int> status(pids.size(), -1);
  size_t left = 0;
  for (pid_t p : pids) left += p > 0;
  while (left) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] <= 0 || status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) status[r] = st, --left;
    }
    if (left && std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (pids[r] > 0 && status[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], &status[r], 0);
          failures += "rank " + std::to_string(r) + ": killed after " + std::to_string(timeout_s) + " s\n";
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  BoardLayout* l = board.layout();
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    bool reported = __atomic_load_n(&l->done[r], __ATOMIC_ACQUIRE) == 1;
    std::string msg = reported ? std::string(l->msg[r]) : std::string();
    bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0 && reported && msg.empty();
    std::string how = WIFEXITED(status[r]) ? "exit code " + std::to_string(WEXITSTATUS(status[r]))
                                           : "wait status " + std::to_string(status[r]);
    if (!ok) failures += (msg.empty() ? "rank " + std::to_string(r) + ": no result" : msg) + " (" + how + ")\n";
  }
  return failures;
}

}  // namespace anyep::testkit
