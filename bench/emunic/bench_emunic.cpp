// bench_emunic: the emulated NIC (libfabric provider emunic) measured against what it models and
// against the libfabric providers anyep runs on today (tcp, shm):
//   post   CPU time per fi_write call (posts/s of one thread), batches of up to tx_attr->size
//          64-byte writes into an empty queue; only the posting calls are timed.
//   bw     achieved vs configured link rate (ANYEP_EMUNIC_GBPS) for 4 KiB .. 1 MiB writes,
//          a full transmit queue, until every completion is back.
//   lat    one-way latency (half a ping-pong of 8-byte writes with CQ data) vs configured
//          (ANYEP_EMUNIC_LATENCY_US).
// Every measurement runs in its own forked process, so each sees its own provider settings (the
// provider reads them once). Endpoints of one process on loopback (FI_TCP_IFACE=lo).
// Usage: bench_emunic [post|bw|lat|all] (default all). FI_PROVIDER_PATH must name the folder of
// libemunic-fi.so (the CMake target sets it when run through `ninja run_bench_emunic`).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void must(long rc, const char* what) {
  if (rc) throw std::runtime_error(std::string(what) + ": " + std::to_string(rc) + " " + fi_strerror(int(-rc)));
}

struct Ep {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq *txcq = nullptr, *rxcq = nullptr;
  fid_ep* ep = nullptr;
  std::vector<char> addr;
  std::vector<fid_mr*> mrs;
  explicit Ep(const char* prov) {
    fi_info* h = fi_allocinfo();
    h->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->av_type = FI_AV_TABLE;
    h->fabric_attr->prov_name = strdup(prov);
    must(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), "fi_getinfo");
    fi_freeinfo(h);
    // tcp on loopback: the IPv4 entry.
    fi_info* pick = info;
    for (fi_info* i = info; i; i = i->next)
      if (i->addr_format == FI_SOCKADDR_IN) {
        pick = i;
        break;
      }
    must(fi_fabric(pick->fabric_attr, &fabric, nullptr), "fi_fabric");
    must(fi_domain(fabric, pick, &domain, nullptr), "fi_domain");
    fi_av_attr a{};
    a.type = FI_AV_TABLE;
    must(fi_av_open(domain, &a, &av, nullptr), "fi_av_open");
    fi_cq_attr c{};
    c.format = FI_CQ_FORMAT_DATA;
    c.wait_obj = FI_WAIT_NONE;
    c.size = 4096;
    must(fi_cq_open(domain, &c, &txcq, nullptr), "fi_cq_open");
    c.size = 16384;
    must(fi_cq_open(domain, &c, &rxcq, nullptr), "fi_cq_open");
    must(fi_endpoint(domain, pick, &ep, nullptr), "fi_endpoint");
    must(fi_ep_bind(ep, &av->fid, 0), "bind");
    must(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT), "bind");
    must(fi_ep_bind(ep, &rxcq->fid, FI_RECV), "bind");
    must(fi_enable(ep), "fi_enable");
    size_t len = 0;
    fi_getname(&ep->fid, nullptr, &len);
    addr.resize(len);
    must(fi_getname(&ep->fid, addr.data(), &len), "fi_getname");
    addr.resize(len);
    tx_size = pick->tx_attr->size;
    mr_mode = pick->domain_attr->mr_mode;
  }
  size_t tx_size = 0;
  int mr_mode = 0;
  fi_addr_t insert(const std::vector<char>& a) {
    fi_addr_t f;
    if (fi_av_insert(av, a.data(), 1, &f, 0, nullptr) != 1) throw std::runtime_error("fi_av_insert");
    return f;
  }
  fid_mr* reg(void* p, size_t len) {
    fid_mr* mr = nullptr;
    must(fi_mr_reg(domain, p, len, FI_WRITE | FI_REMOTE_WRITE, 0, mrs.size() + 1, 0, &mr, nullptr), "fi_mr_reg");
    if (mr_mode & FI_MR_ENDPOINT) {
      must(fi_mr_bind(mr, &ep->fid, 0), "fi_mr_bind");
      must(fi_mr_enable(mr), "fi_mr_enable");
    }
    mrs.push_back(mr);
    return mr;
  }
  ~Ep() {
    fi_close(&ep->fid);
    for (auto* m : mrs) fi_close(&m->fid);
    fi_close(&txcq->fid);
    fi_close(&rxcq->fid);
    fi_close(&av->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
  }
};

struct Link {
  Ep a, b;
  fi_addr_t to_b, to_a;
  explicit Link(const char* prov) : a(prov), b(prov) {
    a.insert(a.addr);
    to_b = a.insert(b.addr);
    to_a = b.insert(a.addr);
    b.insert(b.addr);
  }
  // Reads completions of both sides (tcp and shm progress only when polled); returns a's tx ones.
  size_t drain(fi_cq_data_entry* e, size_t max) {
    fi_cq_read(b.txcq, e, 1);
    fi_cq_read(b.rxcq, e, 1);
    ssize_t n = fi_cq_read(a.txcq, e, max);
    if (n == -FI_EAGAIN) sched_yield();  // a 2-core host: leave the CPU to the provider's threads
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(a.txcq, &err, 0);
      throw std::runtime_error(std::string("write failed: ") + fi_strerror(err.err));
    }
    return n > 0 ? size_t(n) : 0;
  }
};

constexpr double kRunS = 1.0;  // each measurement's duration

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// ---- post: CPU per fi_write ----
std::string bench_post(const char* prov) {
  Link l(prov);
  const size_t bytes = 64, batch = std::min<size_t>(l.a.tx_size ? l.a.tx_size : 256, 256);
  std::vector<uint8_t> src(bytes, 1), dst(bytes * batch, 0);
  fid_mr* smr = l.a.reg(src.data(), src.size());
  fid_mr* dmr = l.b.reg(dst.data(), dst.size());
  void* desc = fi_mr_desc(smr);
  const uint64_t raddr = (l.b.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(dst.data()) : 0;
  const uint64_t key = fi_mr_key(dmr);
  fi_cq_data_entry e[256];
  double post_s = 0, cpu_s = 0;
  uint64_t posts = 0, eagain = 0;
  std::vector<double> per_post;  // wall ns per post, one value per batch
  const auto start = Clock::now();
  while (secs(start, Clock::now()) < kRunS) {
    size_t ok = 0;
    const double c0 = thread_cpu_s();
    const auto t0 = Clock::now();
    for (size_t k = 0; k < batch; ++k) {
      ssize_t rc = fi_write(l.a.ep, src.data(), bytes, desc, l.to_b, raddr + k * bytes, key, &e[k]);
      if (rc == 0)
        ++ok;
      else if (rc == -FI_EAGAIN)
        ++eagain;
      else
        must(rc, "fi_write");
    }
    const double dt = secs(t0, Clock::now());
    cpu_s += thread_cpu_s() - c0;
    post_s += dt;
    posts += ok;
    if (ok) per_post.push_back(1e9 * dt / double(ok));
    l.drain(e, 0);  // progress (tcp and shm connect only when polled)
    for (size_t done = 0; done < ok;) {
      done += l.drain(e, 256);
      if (secs(start, Clock::now()) > 30) throw std::runtime_error("completions did not come back in 30 s");
    }
  }
  const double total = secs(start, Clock::now());
  if (per_post.empty()) return std::string(prov) + ": no post succeeded";
  std::sort(per_post.begin(), per_post.end());
  const double med = per_post[per_post.size() / 2];
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%-7s median %7.1f ns/post (%6.2f M posts/s per thread), mean %7.1f ns wall, %7.1f ns CPU per post; "
                "%5.2f M writes/s end to end (%llu posts, %llu -EAGAIN)",
                prov, med, 1e3 / med, 1e9 * post_s / double(posts), 1e9 * cpu_s / double(posts),
                double(posts) / total / 1e6, (unsigned long long)posts, (unsigned long long)eagain);
  return buf;
}

// ---- bw: achieved vs configured ----
std::string bench_bw(size_t bytes, double cfg) {
  Link l("emunic");
  const size_t window = l.a.tx_size;
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  fid_mr* smr = l.a.reg(src.data(), src.size());
  fid_mr* dmr = l.b.reg(dst.data(), dst.size());
  fi_cq_data_entry e[256];
  uint64_t posted = 0, done = 0;
  const auto start = Clock::now();
  while (secs(start, Clock::now()) < kRunS) {
    while (posted - done < window && fi_write(l.a.ep, src.data(), bytes, fi_mr_desc(smr), l.to_b,
                                              reinterpret_cast<uint64_t>(dst.data()), fi_mr_key(dmr), nullptr) == 0)
      ++posted;
    done += l.drain(e, 256);
  }
  while (done < posted) done += l.drain(e, 256);
  const double s = secs(start, Clock::now());
  const double gbps = double(done) * double(bytes) * 8 / s / 1e9;
  char buf[200];
  std::snprintf(buf, sizeof buf, "configured %6.0f Gb/s  %8zu B writes: achieved %7.1f Gb/s (%5.1f%%)", cfg, bytes,
                gbps, 100 * gbps / cfg);
  return buf;
}

// ---- lat: half a ping-pong ----
std::string bench_lat(double cfg) {
  Link l("emunic");
  std::vector<uint8_t> abuf(8, 0), bbuf(8, 0);
  fid_mr* amr = l.a.reg(abuf.data(), 8);
  fid_mr* bmr = l.b.reg(bbuf.data(), 8);
  fi_cq_data_entry e[16];
  auto wait_rx = [&](fid_cq* cq) {
    const auto t0 = Clock::now();
    while (fi_cq_read(cq, e, 1) != 1) {
      if (secs(t0, Clock::now()) > 10) throw std::runtime_error("no remote completion in 10 s");
      sched_yield();  // a 2-core host: leave the CPU to the provider's threads
    }
  };
  int iters = 0;
  const auto start = Clock::now();
  std::vector<double> rtt;
  while (secs(start, Clock::now()) < kRunS) {
    const auto t0 = Clock::now();
    must(fi_writedata(l.a.ep, abuf.data(), 8, fi_mr_desc(amr), 1, l.to_b, reinterpret_cast<uint64_t>(bbuf.data()),
                      fi_mr_key(bmr), nullptr),
         "fi_writedata");
    wait_rx(l.b.rxcq);
    must(fi_writedata(l.b.ep, bbuf.data(), 8, fi_mr_desc(bmr), 2, l.to_a, reinterpret_cast<uint64_t>(abuf.data()),
                      fi_mr_key(amr), nullptr),
         "fi_writedata");
    wait_rx(l.a.rxcq);
    rtt.push_back(secs(t0, Clock::now()));
    while (fi_cq_read(l.a.txcq, e, 16) > 0 || fi_cq_read(l.b.txcq, e, 16) > 0) {
    }
    ++iters;
  }
  std::sort(rtt.begin(), rtt.end());
  char buf[200];
  std::snprintf(buf, sizeof buf, "configured %5.1f us: one-way median %6.2f us, p99 %6.2f us (%d round trips)", cfg,
                rtt[rtt.size() / 2] / 2 * 1e6, rtt[rtt.size() * 99 / 100] / 2 * 1e6, iters);
  return buf;
}

// Runs `fn` in a child with `env` set; returns its line (or why it failed).
template <class F>
std::string in_child(const std::vector<std::pair<const char*, std::string>>& env, F fn) {
  int fds[2];
  if (pipe(fds)) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    for (auto& [k, v] : env) setenv(k, v.c_str(), 1);
    std::string out;
    try {
      out = fn();
    } catch (const std::exception& ex) {
      out = std::string("FAILED: ") + ex.what();
    }
    ssize_t w = write(fds[1], out.data(), out.size());
    _exit(w == ssize_t(out.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return out.empty() ? "FAILED (child exit " + std::to_string(st) + ")" : out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  if (what != "all" && what != "post" && what != "bw" && what != "lat") {
    std::fprintf(stderr, "usage: %s [post|bw|lat|all]\n", argv[0]);
    return 2;
  }
  utsname u{};
  uname(&u);
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += std::string(i ? " " : "") + argv[i];
  const char* fpp = std::getenv("FI_PROVIDER_PATH");
  std::printf("bench_emunic: %s\nmachine: %s, %u CPUs, %s %s\nlibfabric %u.%u, FI_PROVIDER_PATH=%s\n", cmd.c_str(),
              cpu_model().c_str(), std::thread::hardware_concurrency(), u.sysname, u.release, FI_MAJOR(fi_version()),
              FI_MINOR(fi_version()), fpp ? fpp : "(unset: emunic will not load)");
  setenv("FI_TCP_IFACE", "lo", 0);
  using Env = std::vector<std::pair<const char*, std::string>>;
  if (what == "all" || what == "post") {
    std::printf("\n-- post: CPU time per fi_write (64 B writes, batches of up to tx_attr->size into an empty queue)\n");
    for (const char* p : {"emunic", "tcp", "shm"})
      std::printf("%s\n", in_child({}, [p] { return bench_post(p); }).c_str());
    std::printf("%s\n", in_child(Env{{"ANYEP_EMUNIC_POST_NS", "200"}}, [] {
                          return "ANYEP_EMUNIC_POST_NS=200: " + bench_post("emunic");
                        }).c_str());
  }
  if (what == "all" || what == "bw") {
    std::printf("\n-- bw: achieved vs configured link rate (one port, a full transmit queue, host memcpy)\n");
    for (const char* g : {"25", "50", "100", "200", "400", "800"})
      for (size_t b : {size_t{4096}, size_t{65536}, size_t{1} << 20})
        std::printf("%s\n",
                    in_child(Env{{"ANYEP_EMUNIC_GBPS", g}}, [b, g] { return bench_bw(b, std::atof(g)); }).c_str());
  }
  if (what == "all" || what == "lat") {
    std::printf("\n-- lat: one-way latency of an 8 B write with CQ data (half a ping-pong)\n");
    for (const char* l : {"2", "10", "50"})
      std::printf("%s\n",
                  in_child(Env{{"ANYEP_EMUNIC_LATENCY_US", l}}, [l] { return bench_lat(std::atof(l)); }).c_str());
  }
  return 0;
}
