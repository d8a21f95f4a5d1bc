// anyep/tests/unit/emunic/fi_node.h — one libfabric endpoint on the emulated NIC, opened the way the
// libfabric backend opens it (RDM, RMA writes, FI_SOURCE, table AV, data CQs), for the provider's
// own tests. Every wait is bounded and fails naming what it waited for.
#pragma once

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace emunic_test {

constexpr uint64_t kCaps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SOURCE;
constexpr int kModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

inline fi_info* hints(uint64_t extra_caps = 0, int extra_modes = 0) {
  fi_info* h = fi_allocinfo();
  h->caps = kCaps | extra_caps;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = kModes | extra_modes;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->fabric_attr->prov_name = strdup("emunic");
  return h;
}

// fi_getinfo's answer for `extra_caps` (null and *rc when none).
inline fi_info* query(uint64_t extra_caps, int* rc, int extra_modes = 0) {
  fi_info* h = hints(extra_caps, extra_modes);
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

  explicit Node(uint64_t extra_caps = 0) {
    int rc = 0;
    info = query(extra_caps, &rc);
    if (!info) throw std::runtime_error("fi_getinfo(emunic) failed: " + std::to_string(rc));
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
    cq.size = 16384;
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
    close_ep();
    for (fid_mr* m : mrs) fi_close(&m->fid);
    if (txcq) fi_close(&txcq->fid);
    if (rxcq) fi_close(&rxcq->fid);
    if (av) fi_close(&av->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }
  void close_ep() {
    if (ep) fi_close(&ep->fid);
    ep = nullptr;
  }
  static void must(int rc, const char* what) {
    if (rc) throw std::runtime_error(std::string(what) + " failed: " + std::to_string(rc) + " " + fi_strerror(-rc));
  }
  fi_addr_t insert(const std::vector<char>& a) {
    fi_addr_t f = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(av, a.data(), 1, &f, 0, nullptr) != 1) throw std::runtime_error("fi_av_insert");
    return f;
  }
  std::vector<fid_mr*> mrs;
  fid_mr* reg(void* p, size_t len, uint64_t access = FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ) {
    iovec iov{p, len};
    fi_mr_attr a{};
    a.mr_iov = &iov;
    a.iov_count = 1;
    a.access = access;
    a.iface = FI_HMEM_SYSTEM;
    fid_mr* mr = nullptr;
    must(fi_mr_regattr(domain, &a, 0, &mr), "fi_mr_regattr");
    mrs.push_back(mr);
    return mr;
  }
};

using Clock = std::chrono::steady_clock;

// Reads one entry from `cq` within `seconds`; the error entry when one is there (returns -FI_EAVAIL).
inline ssize_t read_one(fid_cq* cq, fi_cq_data_entry* e, fi_addr_t* src, fi_cq_err_entry* err, double seconds = 10) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    ssize_t rc = src ? fi_cq_readfrom(cq, e, 1, src) : fi_cq_read(cq, e, 1);
    if (rc == 1) return 1;
    if (rc == -FI_EAVAIL) {
      *err = {};
      if (fi_cq_readerr(cq, err, 0) != 1) return -FI_EIO;
      return -FI_EAVAIL;
    }
    if (rc != -FI_EAGAIN) return rc;
  }
  return -FI_ETIMEDOUT;
}

}  // namespace emunic_test
