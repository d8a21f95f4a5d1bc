// The emulated NIC (libfabric provider emunic) on its own: what fi_getinfo grants per profile,
// completions only after the data is in place, every access checked against the registration,
// backpressure, ordering per profile, atomics (verbs) and their refusal (efa), peer loss.
// ctest runs this binary once per profile (tests/unit/emunic/CMakeLists.txt): suites Common.*
// in both, Efa.* / Verbs.* in their own, Mutation.* with the provider's mutation switched on,
// where it must fail.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <thread>

#include "fi_node.h"

namespace emunic_test {
namespace {

struct Pair {
  Node a, b;
  fi_addr_t a_to_b, b_to_a = FI_ADDR_NOTAVAIL;
  // b_knows_a false: b's AV lacks a until introduce(), and b holds a's writes with CQ data until
  // then (it cannot name their source): a's queue fills deterministically.
  explicit Pair(uint64_t caps = 0, bool b_knows_a = true) : a(caps), b(caps) {
    // Both AVs list a then b: fi_addr is the index (FI_AV_TABLE).
    a.insert(a.addr);
    a_to_b = a.insert(b.addr);
    if (b_knows_a) introduce();
  }
  void introduce() {
    b_to_a = b.insert(a.addr);
    b.insert(b.addr);
  }
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<uint8_t>(x);
  }
  return v;
}

// ---- both profiles ----

TEST(Common, GetinfoOffersRdmWritesWithSourceAndBoundedQueue) {
  int rc = 0;
  fi_info* i = query(0, &rc);
  ASSERT_NE(i, nullptr) << rc;
  EXPECT_STREQ(i->fabric_attr->prov_name, "emunic");
  EXPECT_EQ(i->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(i->caps & kCaps, kCaps);
  EXPECT_EQ(i->domain_attr->cq_data_size, 4u);
  EXPECT_EQ(i->tx_attr->size, 256u);
  EXPECT_EQ(i->addr_format, static_cast<uint32_t>(FI_ADDR_STR));
  const int modes = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  EXPECT_EQ(i->domain_attr->mr_mode & modes, modes);
  fi_freeinfo(i);
  // Registration modes the application cannot honour: no match.
  fi_info* h = hints();
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR;
  fi_info* res = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &res), -FI_ENODATA);
  fi_freeinfo(h);
}

TEST(Common, WriteIsInPlaceAtBothCompletionsAndNamesItsSource) {
  Pair p;
  const size_t n = 100 * 1024 + 17;  // 13 packets, the last one short
  std::vector<uint8_t> src = pattern(n, 1), dst(n, 0);
  fid_mr* smr = p.a.reg(src.data(), n);
  fid_mr* dmr = p.b.reg(dst.data(), n);
  ASSERT_EQ(fi_writedata(p.a.ep, src.data(), n, fi_mr_desc(smr), 0xabcd1234, p.a_to_b,
                         reinterpret_cast<uint64_t>(dst.data()), fi_mr_key(dmr), &src),
            0);
  fi_cq_data_entry e{};
  fi_cq_err_entry err{};
  fi_addr_t from = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(read_one(p.b.rxcq, &e, &from, &err), 1) << err.err;
  EXPECT_TRUE(e.flags & FI_REMOTE_CQ_DATA);
  EXPECT_EQ(e.data, 0xabcd1234u);
  EXPECT_EQ(from, p.b_to_a);
  EXPECT_TRUE(dst == src) << "remote CQ entry before the data was in place";
  std::fill(dst.begin(), dst.end(), 0);  // not rewritten by anything later
  ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), 1) << err.err;
  EXPECT_EQ(e.op_context, &src);
  EXPECT_TRUE(e.flags & FI_WRITE);
  // Plain writes raise no remote entry.
  ASSERT_EQ(fi_write(p.a.ep, src.data(), 64, fi_mr_desc(smr), p.a_to_b, reinterpret_cast<uint64_t>(dst.data()),
                     fi_mr_key(dmr), nullptr),
            0);
  ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), 1);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 64, dst.begin())) << "tx completion before the data was in place";
  EXPECT_EQ(fi_cq_read(p.b.rxcq, &e, 1), -FI_EAGAIN);
}

// The check every access meets at the target: key, bounds, access flags. Each bad write is an error
// completion at the writer naming the reason, and nothing lands.
TEST(Common, BadKeyBoundsAndAccessAreErrorCompletions) {
  Pair p;
  std::vector<uint8_t> src(4096, 0x5a), dst(4096, 0), ro(64, 0);
  fid_mr* smr = p.a.reg(src.data(), src.size());
  fid_mr* dmr = p.b.reg(dst.data(), dst.size());
  fid_mr* romr = p.b.reg(ro.data(), ro.size(), FI_REMOTE_READ);
  const uint64_t base = reinterpret_cast<uint64_t>(dst.data());
  struct Bad {
    uint64_t addr, key;
    size_t len;
    int err;
    const char* what;
  } bad[] = {
      {base, fi_mr_key(dmr) ^ 0x1234, 64, FI_EKEYREJECTED, "unknown key"},
      {base + 4000, fi_mr_key(dmr), 200, FI_EACCES, "past the end"},
      {base - 8, fi_mr_key(dmr), 16, FI_EACCES, "before the start"},
      {reinterpret_cast<uint64_t>(ro.data()), fi_mr_key(romr), 8, FI_EACCES, "no FI_REMOTE_WRITE"},
  };
  for (const Bad& b : bad) {
    ASSERT_EQ(fi_writedata(p.a.ep, src.data(), b.len, fi_mr_desc(smr), 7, p.a_to_b, b.addr, b.key, nullptr), 0);
    fi_cq_data_entry e{};
    fi_cq_err_entry err{};
    ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), -FI_EAVAIL) << b.what;
    EXPECT_EQ(err.err, b.err) << b.what;
    char buf[256];
    std::string text = fi_cq_strerror(p.a.txcq, err.prov_errno, err.err_data, buf, sizeof buf);
    EXPECT_NE(text.find("emunic"), std::string::npos) << text;
    std::cout << "[ info ] " << b.what << ": " << text << "\n";
  }
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t c) { return c == 0; }));
  EXPECT_TRUE(std::all_of(ro.begin(), ro.end(), [](uint8_t c) { return c == 0; }));
  fi_cq_data_entry e{};
  EXPECT_EQ(fi_cq_read(p.b.rxcq, &e, 1), -FI_EAGAIN) << "a refused write raised a remote entry";
  // A source outside its descriptor's registration is refused at post time (FI_MR_LOCAL).
  if (p.a.info->domain_attr->mr_mode & FI_MR_LOCAL) {
    EXPECT_EQ(fi_write(p.a.ep, src.data() + 4000, 200, fi_mr_desc(smr), p.a_to_b, base, fi_mr_key(dmr), nullptr),
              -FI_EINVAL);
  }
}

TEST(Common, FullTransmitQueueSaysEagainAndEveryPostCompletesOnce) {
  Pair p(0, false);  // b holds every write until it knows a: nothing completes while a posts
  const size_t n = 64 << 10;
  std::vector<uint8_t> src(n, 1), dst(n, 0);
  fid_mr* smr = p.a.reg(src.data(), n);
  fid_mr* dmr = p.b.reg(dst.data(), n);
  size_t posted = 0;
  ssize_t rc = 0;
  while ((rc = fi_writedata(p.a.ep, src.data(), n, fi_mr_desc(smr), posted, p.a_to_b,
                            reinterpret_cast<uint64_t>(dst.data()), fi_mr_key(dmr),
                            reinterpret_cast<void*>(posted + 1))) == 0 &&
         posted < 100000)
    ++posted;
  EXPECT_EQ(rc, -FI_EAGAIN);
  EXPECT_EQ(posted, p.a.info->tx_attr->size) << "the queue holds exactly tx_attr->size operations";
  p.introduce();
  std::vector<int> seen(posted + 1, 0);
  for (size_t k = 0; k < posted; ++k) {
    fi_cq_data_entry e{};
    fi_cq_err_entry err{};
    ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err, 30), 1) << "completion " << k << " err " << err.err;
    const auto c = reinterpret_cast<uintptr_t>(e.op_context);
    ASSERT_TRUE(c >= 1 && c <= posted && ++seen[c] == 1) << c;
  }
  // Room again (and its completion awaited: the buffers go when the test ends).
  ASSERT_EQ(fi_write(p.a.ep, src.data(), 8, fi_mr_desc(smr), p.a_to_b, reinterpret_cast<uint64_t>(dst.data()),
                     fi_mr_key(dmr), nullptr),
            0);
  fi_cq_data_entry e{};
  fi_cq_err_entry err{};
  EXPECT_EQ(read_one(p.a.txcq, &e, nullptr, &err), 1);
}

TEST(Common, ClosedPeerIsAnErrorCompletion) {
  Pair p;
  std::vector<uint8_t> src(64, 1), dst(64, 0);
  fid_mr* smr = p.a.reg(src.data(), 64);
  fid_mr* dmr = p.b.reg(dst.data(), 64);
  const uint64_t key = fi_mr_key(dmr);
  p.b.close_ep();
  ASSERT_EQ(
      fi_write(p.a.ep, src.data(), 64, fi_mr_desc(smr), p.a_to_b, reinterpret_cast<uint64_t>(dst.data()), key, nullptr),
      0);
  fi_cq_data_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_EHOSTUNREACH);
}

// A peer whose process died without closing anything: its segment is still there, its pid is gone.
TEST(Common, DeadPeerProcessIsAnErrorCompletion) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Node c;
    std::vector<uint8_t> dst(64, 0);
    fid_mr* mr = c.reg(dst.data(), 64);
    uint64_t key = fi_mr_key(mr), base = reinterpret_cast<uint64_t>(dst.data());
    uint32_t len = static_cast<uint32_t>(c.addr.size());
    bool ok = write(fds[1], &len, 4) == 4 && write(fds[1], c.addr.data(), len) == len && write(fds[1], &key, 8) == 8 &&
              write(fds[1], &base, 8) == 8;
    _exit(ok ? 0 : 1);  // no close: as if killed
  }
  close(fds[1]);
  uint32_t len = 0;
  uint64_t key = 0, base = 0;
  ASSERT_EQ(read(fds[0], &len, 4), 4);
  std::vector<char> addr(len);
  ASSERT_EQ(read(fds[0], addr.data(), len), static_cast<ssize_t>(len));
  ASSERT_EQ(read(fds[0], &key, 8), 8);
  ASSERT_EQ(read(fds[0], &base, 8), 8);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  Node a;
  fi_addr_t to = a.insert(addr);
  std::vector<uint8_t> src(64, 1);
  fid_mr* smr = a.reg(src.data(), 64);
  ASSERT_EQ(fi_write(a.ep, src.data(), 64, fi_mr_desc(smr), to, base, key, nullptr), 0);
  fi_cq_data_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(read_one(a.txcq, &e, nullptr, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_EHOSTUNREACH);
}

TEST(Common, CudaRegistrationWithoutGpuMoverIsEnosys) {
  Node a;
  std::vector<uint8_t> buf(64);
  iovec iov{buf.data(), buf.size()};
  fi_mr_attr at{};
  at.mr_iov = &iov;
  at.iov_count = 1;
  at.access = FI_REMOTE_WRITE;
  at.iface = FI_HMEM_CUDA;
  fid_mr* mr = nullptr;
  EXPECT_EQ(fi_mr_regattr(a.domain, &at, 0, &mr), -FI_ENOSYS) << "the backend then stages through host memory";
}

TEST(Common, UnusedOpsAreEnosys) {
  Node a;
  char b[8];
  EXPECT_EQ(fi_send(a.ep, b, 8, nullptr, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_recv(a.ep, b, 8, nullptr, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_read(a.ep, b, 8, nullptr, 0, 0, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_inject_write(a.ep, b, 8, 0, 0, 0), -FI_ENOSYS);
  fid_cntr* c = nullptr;
  fi_cntr_attr ca{};
  EXPECT_EQ(fi_cntr_open(a.domain, &ca, &c, nullptr), -FI_ENOSYS);
}

// Remote CQ entries of `count` writes, in arrival order of their CQ data. `p` is made with b not
// knowing a: the writes pile up in a's queue until b is introduced, so the sender has many
// messages at once to order (or not) whatever the scheduling of the threads.
std::vector<uint64_t> arrival_order(Pair& p, size_t count, size_t bytes) {
  std::vector<uint8_t> src(bytes, 3), dst(bytes * count, 0);
  fid_mr* smr = p.a.reg(src.data(), src.size());
  fid_mr* dmr = p.b.reg(dst.data(), dst.size());
  std::vector<uint64_t> got;
  size_t posted = 0, done = 0;
  while (posted < count &&
         fi_writedata(p.a.ep, src.data(), bytes, fi_mr_desc(smr), posted, p.a_to_b,
                      reinterpret_cast<uint64_t>(dst.data()) + posted * bytes, fi_mr_key(dmr), nullptr) == 0)
    ++posted;
  p.introduce();
  const auto end = Clock::now() + std::chrono::seconds(20);
  while ((got.size() < count || done < count) && Clock::now() < end) {
    if (posted < count &&
        fi_writedata(p.a.ep, src.data(), bytes, fi_mr_desc(smr), posted, p.a_to_b,
                     reinterpret_cast<uint64_t>(dst.data()) + posted * bytes, fi_mr_key(dmr), nullptr) == 0)
      ++posted;
    fi_cq_data_entry e[16];
    ssize_t n = fi_cq_read(p.a.txcq, e, 16);
    if (n > 0) done += static_cast<size_t>(n);
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(p.a.txcq, &err, 0);
      ADD_FAILURE() << "write failed: " << fi_cq_strerror(p.a.txcq, err.prov_errno, err.err_data, nullptr, 0);
      break;
    }
    n = fi_cq_read(p.b.rxcq, e, 16);
    for (ssize_t k = 0; k < n; ++k) got.push_back(e[k].data);
  }
  EXPECT_EQ(got.size(), count);
  return got;
}

// ---- efa ----

TEST(Efa, NoAtomicsNoOrderAndHmemModes) {
  int rc = 0;
  EXPECT_EQ(query(FI_ATOMIC | FI_READ | FI_REMOTE_READ, &rc), nullptr);
  EXPECT_EQ(rc, -FI_ENODATA) << "efa grants no FI_ATOMIC";
  fi_info* i = query(FI_HMEM, &rc, FI_MR_HMEM);
  ASSERT_NE(i, nullptr) << rc;
  EXPECT_EQ(i->tx_attr->msg_order, 0u);
  EXPECT_EQ(i->rx_attr->msg_order, 0u);
  EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM);
  EXPECT_TRUE(i->caps & FI_HMEM);
  fi_freeinfo(i);
  Node a;
  fi_atomic_attr at{};
  EXPECT_NE(fi_query_atomic(a.domain, FI_UINT64, FI_SUM, &at, FI_FETCH_ATOMIC), 0);
  uint64_t v = 1, old = 0;
  EXPECT_EQ(fi_fetch_atomic(a.ep, &v, 1, nullptr, &old, nullptr, 0, 0, 0, FI_UINT64, FI_SUM, nullptr), -FI_ENOSYS);
}

TEST(Efa, MessagesArriveOutOfOrder) {
  Pair p(0, false);
  std::vector<uint64_t> got = arrival_order(p, 400, 64);
  std::vector<uint64_t> sorted(got);
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> want(got.size());
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted, want) << "every write exactly once";
  EXPECT_FALSE(std::is_sorted(got.begin(), got.end())) << "no ordering between messages: expected reordering";
}

// ---- verbs ----

TEST(Verbs, OrderedWithAtomicsAndVerbsModes) {
  int rc = 0;
  fi_info* i = query(FI_ATOMIC | FI_READ | FI_REMOTE_READ, &rc);
  ASSERT_NE(i, nullptr) << rc;
  for (uint64_t o : {FI_ORDER_RAW, FI_ORDER_WAW, FI_ORDER_SAW, FI_ORDER_RAR, FI_ORDER_WAS, FI_ORDER_SAS})
    EXPECT_TRUE(i->tx_attr->msg_order & o) << o;
  EXPECT_EQ(i->domain_attr->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY),
            FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
  fi_freeinfo(i);
}

TEST(Verbs, MessagesArriveInPostingOrder) {
  Pair p(0, false);
  std::vector<uint64_t> got = arrival_order(p, 400, 20000);  // 3 packets each
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
}

TEST(Verbs, FetchingAddsApplyOnceAndReturnOldValues) {
  Pair p(FI_ATOMIC | FI_READ | FI_REMOTE_READ);
  fi_atomic_attr at{};
  ASSERT_EQ(fi_query_atomic(p.a.domain, FI_UINT64, FI_SUM, &at, FI_FETCH_ATOMIC), 0);
  EXPECT_EQ(at.size, 8u);
  EXPECT_GE(at.count, 1u);
  ASSERT_EQ(fi_query_atomic(p.a.domain, FI_UINT32, FI_SUM, &at, 0), 0);
  EXPECT_NE(fi_query_atomic(p.a.domain, FI_UINT64, FI_CSWAP, &at, FI_COMPARE_ATOMIC), 0);
  struct alignas(8) Target {
    uint64_t w64;
    uint32_t w32[2];
  } t{100, {7, 0}};
  fid_mr* mr = p.b.reg(&t, sizeof t);
  const uint64_t base = reinterpret_cast<uint64_t>(&t);
  constexpr int kAdds = 50;
  std::vector<uint64_t> olds(kAdds);
  std::vector<uint64_t> ones(kAdds, 3);
  for (int k = 0; k < kAdds; ++k) {
    fi_ioc src{&ones[k], 1}, res{&olds[k], 1};
    fi_rma_ioc dst{base, 1, fi_mr_key(mr)};
    fi_msg_atomic m{};
    void* nodesc[1] = {nullptr};
    m.msg_iov = &src;
    m.desc = nodesc;
    m.iov_count = 1;
    m.addr = p.a_to_b;
    m.rma_iov = &dst;
    m.rma_iov_count = 1;
    m.datatype = FI_UINT64;
    m.op = FI_SUM;
    m.context = &olds[k];
    ssize_t rc;
    while ((rc = fi_fetch_atomicmsg(p.a.ep, &m, &res, nodesc, 1, FI_COMPLETION)) == -FI_EAGAIN) {
    }
    ASSERT_EQ(rc, 0);
  }
  for (int k = 0; k < kAdds; ++k) {
    fi_cq_data_entry e{};
    fi_cq_err_entry err{};
    ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), 1) << err.err;
    EXPECT_EQ(*static_cast<uint64_t*>(e.op_context) % 3, 100u % 3) << "old value fetched before completion";
  }
  EXPECT_EQ(__atomic_load_n(&t.w64, __ATOMIC_SEQ_CST), 100u + 3u * kAdds);
  std::vector<uint64_t> sorted(olds);
  std::sort(sorted.begin(), sorted.end());
  for (int k = 0; k < kAdds; ++k) EXPECT_EQ(sorted[k], 100u + 3u * k) << "each add saw the one before";
  // 32-bit add, and a misaligned target (an error completion).
  uint32_t v32 = 5, old32 = 0;
  ASSERT_EQ(fi_fetch_atomic(p.a.ep, &v32, 1, nullptr, &old32, nullptr, p.a_to_b, base + 8, fi_mr_key(mr), FI_UINT32,
                            FI_SUM, nullptr),
            0);
  fi_cq_data_entry e{};
  fi_cq_err_entry err{};
  ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), 1);
  EXPECT_EQ(old32, 7u);
  EXPECT_EQ(__atomic_load_n(&t.w32[0], __ATOMIC_SEQ_CST), 12u);
  uint64_t v = 1, old = 0;
  ASSERT_EQ(fi_fetch_atomic(p.a.ep, &v, 1, nullptr, &old, nullptr, p.a_to_b, base + 4, fi_mr_key(mr), FI_UINT64, FI_SUM,
                            nullptr),
            0);
  ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_EINVAL);
  // A bad key: refused, nothing applied.
  ASSERT_EQ(fi_fetch_atomic(p.a.ep, &v, 1, nullptr, &old, nullptr, p.a_to_b, base, fi_mr_key(mr) + 1, FI_UINT64, FI_SUM,
                            nullptr),
            0);
  ASSERT_EQ(read_one(p.a.txcq, &e, nullptr, &err), -FI_EAVAIL);
  EXPECT_EQ(err.err, FI_EKEYREJECTED);
  EXPECT_EQ(__atomic_load_n(&t.w64, __ATOMIC_SEQ_CST), 100u + 3u * kAdds);
}

// ---- several ports ----

TEST(Ports, EachPortIsItsOwnDomain) {
  int rc = 0;
  fi_info* i = query(0, &rc);
  ASSERT_NE(i, nullptr) << rc;
  std::vector<std::string> names;
  for (fi_info* k = i; k; k = k->next) names.push_back(k->domain_attr->name);
  fi_freeinfo(i);
  EXPECT_EQ(names, (std::vector<std::string>{"emunic_0", "emunic_1"}));
}

}  // namespace
}  // namespace emunic_test
