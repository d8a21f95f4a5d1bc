// anyep/tests/gpu/emunic/test_emunic_hmem.cpp — the emulated NIC with its GPU mover: two endpoints
// of one process, memory from cudaMalloc registered through fi_mr_regattr(FI_HMEM_CUDA), writes with
// remote CQ data GPU->GPU, host->GPU and GPU->host. When the target's CQ entry is read, the
// target buffer is copied out at once and must already hold every byte (data before the entry).
// Also: a host pointer registered as CUDA memory is refused, and (verbs) FI_HMEM with FI_ATOMIC is
// not offered. Prints PASS/FAIL per case; exit 0, 1 on a failure, 77 without a GPU.
#include <cuda_runtime.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../gpu_count.h"

namespace {

constexpr uint64_t kCaps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SOURCE | FI_HMEM;
constexpr int kModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_HMEM;

void must(long rc, const std::string& what) {
  if (rc) throw std::runtime_error(what + " failed: " + std::to_string(rc) + " " + fi_strerror(static_cast<int>(-rc)));
}
void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

fi_info* query(uint64_t caps, int* rc) {
  fi_info* h = fi_allocinfo();
  h->caps = caps;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = kModes;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->fabric_attr->prov_name = strdup("emunic");
  fi_info* res = nullptr;
  *rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &res);
  fi_freeinfo(h);
  return res;
}

struct Node {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* txcq = nullptr;
  fid_cq* rxcq = nullptr;
  fid_ep* ep = nullptr;
  std::vector<char> addr;
  std::vector<fid_mr*> mrs;

  Node() {
    int rc = 0;
    info = query(kCaps, &rc);
    if (!info) throw std::runtime_error("fi_getinfo(emunic, FI_HMEM) found nothing: " + std::to_string(rc));
    must(fi_fabric(info->fabric_attr, &fabric, nullptr), "fi_fabric");
    must(fi_domain(fabric, info, &domain, nullptr), "fi_domain");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    must(fi_av_open(domain, &av_attr, &av, nullptr), "fi_av_open");
    fi_cq_attr cq{};
    cq.format = FI_CQ_FORMAT_DATA;
    cq.wait_obj = FI_WAIT_NONE;
    cq.size = 1024;
    must(fi_cq_open(domain, &cq, &txcq, nullptr), "fi_cq_open tx");
    must(fi_cq_open(domain, &cq, &rxcq, nullptr), "fi_cq_open rx");
    must(fi_endpoint(domain, info, &ep, nullptr), "fi_endpoint");
    must(fi_ep_bind(ep, &av->fid, 0), "bind av");
    must(fi_ep_bind(ep, &txcq->fid, FI_TRANSMIT), "bind tx");
    must(fi_ep_bind(ep, &rxcq->fid, FI_RECV), "bind rx");
    must(fi_enable(ep), "fi_enable");
    size_t len = 0;
    if (fi_getname(&ep->fid, nullptr, &len) != -FI_ETOOSMALL) throw std::runtime_error("fi_getname size");
    addr.resize(len);
    must(fi_getname(&ep->fid, addr.data(), &len), "fi_getname");
  }
  ~Node() {
    if (ep) fi_close(&ep->fid);
    for (fid_mr* m : mrs) fi_close(&m->fid);
    if (txcq) fi_close(&txcq->fid);
    if (rxcq) fi_close(&rxcq->fid);
    if (av) fi_close(&av->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }
  int try_reg(void* p, size_t len, fi_hmem_iface iface, fid_mr** mr) {
    iovec iov{p, len};
    fi_mr_attr a{};
    a.mr_iov = &iov;
    a.iov_count = 1;
    a.access = FI_WRITE | FI_REMOTE_WRITE;
    a.iface = iface;
    a.device.cuda = 0;
    return fi_mr_regattr(domain, &a, 0, mr);
  }
  fid_mr* reg(void* p, size_t len, fi_hmem_iface iface) {
    fid_mr* mr = nullptr;
    must(try_reg(p, len, iface, &mr), iface == FI_HMEM_CUDA ? "fi_mr_regattr(FI_HMEM_CUDA)" : "fi_mr_regattr(host)");
    mrs.push_back(mr);
    return mr;
  }
  fi_addr_t insert(const std::vector<char>& a) {
    fi_addr_t f = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(av, a.data(), 1, &f, 0, nullptr) != 1) throw std::runtime_error("fi_av_insert");
    return f;
  }
};

// One entry from `cq` within 10 s; an error entry or a timeout throws naming `what`.
void read_one(fid_cq* cq, fi_cq_data_entry* e, const char* what) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    const ssize_t rc = fi_cq_read(cq, e, 1);
    if (rc == 1) return;
    if (rc == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      throw std::runtime_error(std::string(what) + ": error completion: " + fi_strerror(err.err) +
                               " prov_errno=" + std::to_string(err.prov_errno));
    }
    if (rc != -FI_EAGAIN) must(rc, std::string(what) + ": fi_cq_read");
  }
  throw std::runtime_error(std::string(what) + ": no completion within 10 s");
}

uint8_t pattern(size_t i, uint32_t round) { return static_cast<uint8_t>((i * 131u + round * 7u + 1u) & 0xff); }

int failures = 0;
void report(const std::string& name, const std::string& problem) {
  std::printf("%s %s%s%s\n", problem.empty() ? "PASS" : "FAIL", name.c_str(), problem.empty() ? "" : ": ",
              problem.c_str());
  if (!problem.empty()) ++failures;
}

// A write of `len` bytes from a buffer on `src_gpu` (else host) into one on `dst_gpu` (else host)
// with remote CQ data, repeated `rounds` times with a new pattern each time.
std::string write_case(Node& a, Node& b, bool src_gpu, bool dst_gpu, size_t len, uint32_t rounds) {
  void* src = nullptr;
  void* dst = nullptr;
  std::vector<uint8_t> host_src(src_gpu ? 0 : len), host_dst(dst_gpu ? 0 : len), expect(len), seen(len);
  if (src_gpu)
    cuda(cudaMalloc(&src, len), "cudaMalloc(source)");
  else
    src = host_src.data();
  if (dst_gpu)
    cuda(cudaMalloc(&dst, len), "cudaMalloc(target)");
  else
    dst = host_dst.data();
  std::string problem;
  try {
    fid_mr* smr = a.reg(src, len, src_gpu ? FI_HMEM_CUDA : FI_HMEM_SYSTEM);
    fid_mr* dmr = b.reg(dst, len, dst_gpu ? FI_HMEM_CUDA : FI_HMEM_SYSTEM);
    const fi_addr_t to_b = a.insert(b.addr);
    b.insert(a.addr);  // the target names the writer (FI_SOURCE)
    for (uint32_t r = 0; r < rounds && problem.empty(); ++r) {
      for (size_t i = 0; i < len; ++i) expect[i] = pattern(i, r);
      if (src_gpu)
        cuda(cudaMemcpy(src, expect.data(), len, cudaMemcpyHostToDevice), "cudaMemcpy(source)");
      else
        std::memcpy(src, expect.data(), len);
      if (dst_gpu)
        cuda(cudaMemset(dst, 0, len), "cudaMemset(target)");
      else
        std::memset(dst, 0, len);
      const uint64_t cq_data = 0x5a000000u + r;
      ssize_t rc;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while ((rc = fi_writedata(a.ep, src, len, fi_mr_desc(smr), cq_data, to_b, reinterpret_cast<uint64_t>(dst),
                                fi_mr_key(dmr), nullptr)) == -FI_EAGAIN &&
             std::chrono::steady_clock::now() < end) {
      }
      must(rc, "fi_writedata");
      fi_cq_data_entry e{};
      read_one(b.rxcq, &e, "the target's remote CQ entry");
      // The entry is out: every byte must already be in place.
      if (dst_gpu)
        cuda(cudaMemcpy(seen.data(), dst, len, cudaMemcpyDeviceToHost), "cudaMemcpy(target)");
      else
        std::memcpy(seen.data(), dst, len);
      if (!(e.flags & FI_REMOTE_CQ_DATA) || e.data != cq_data)
        problem = "round " + std::to_string(r) + ": CQ data " + std::to_string(e.data) + ", expected " +
                  std::to_string(cq_data);
      for (size_t i = 0; i < len && problem.empty(); ++i)
        if (seen[i] != expect[i])
          problem = "round " + std::to_string(r) + ": byte " + std::to_string(i) + " of " + std::to_string(len) +
                    " is " + std::to_string(seen[i]) + ", expected " + std::to_string(expect[i]) +
                    " when the remote CQ entry was read";
      fi_cq_data_entry t{};
      read_one(a.txcq, &t, "the writer's completion");
    }
  } catch (const std::exception& ex) {
    problem = ex.what();
  }
  if (src_gpu) cudaFree(src);
  if (dst_gpu) cudaFree(dst);
  return problem;
}

}  // namespace

int main() {
  const char* profile = std::getenv("ANYEP_EMUNIC_PROFILE");
  std::printf("emunic FI_HMEM test, profile %s\n", profile ? profile : "efa (default)");
  // Skip only on a machine without a CUDA device; any other error fails (tests/gpu/gpu_count.h).
  const anyep::gputest::GpuCount g = anyep::gputest::count_gpus();
  if (!anyep::gputest::means_no_device(g.err)) {
    std::printf("FAIL: %s: not a machine without GPUs, so not a skip\n", anyep::gputest::gpu_count_text(g).c_str());
    return 1;
  }
  if (g.n == 0) {
    std::printf("SKIP: %s\n", anyep::gputest::gpu_count_text(g).c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("GPU 0: %s\n", prop.name);
  try {
    Node a, b;
    report("gpu_to_gpu_1MiB", write_case(a, b, true, true, size_t{1} << 20, 8));
    report("gpu_to_gpu_7.4KiB", write_case(a, b, true, true, 7578, 64));
    report("host_to_gpu_256KiB", write_case(a, b, false, true, size_t{256} << 10, 4));
    report("gpu_to_host_256KiB", write_case(a, b, true, false, size_t{256} << 10, 4));
    // A host pointer is not GPU memory: the registration names the problem instead of faulting
    // the mover's kernel later.
    std::vector<uint8_t> host(4096);
    fid_mr* mr = nullptr;
    const int rc = a.try_reg(host.data(), host.size(), FI_HMEM_CUDA, &mr);
    if (rc == 0) fi_close(&mr->fid);
    report("host_pointer_as_cuda_refused",
           rc == -FI_EINVAL ? "" : "fi_mr_regattr returned " + std::to_string(rc) + ", expected -FI_EINVAL");
  } catch (const std::exception& ex) {
    report("setup", ex.what());
  }
  if (profile && std::string(profile) == "verbs") {
    int rc = 0;
    fi_info* i = query(kCaps | FI_ATOMIC, &rc);
    report("verbs_hmem_with_atomics_not_offered", i ? "fi_getinfo offered FI_HMEM with FI_ATOMIC" : "");
    if (i) fi_freeinfo(i);
    i = query((kCaps & ~FI_HMEM) | FI_ATOMIC, &rc);
    report("verbs_atomics_without_hmem_offered", i ? "" : "fi_getinfo refused FI_ATOMIC: " + std::to_string(rc));
    if (i) fi_freeinfo(i);
  }
  std::printf("%s\n", failures ? "FAILED" : "ALL PASSED");
  return failures ? 1 : 0;
}
