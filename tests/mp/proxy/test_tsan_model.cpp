// Negative control for the NIC model the multi-process workload gives TSan
// (testkit/tsan_transport.h), built in TSan builds only: with the LL producers refilling a parity
// buffer before its ack came back (WorkloadConfig::refill_before_ack, a real bug), TSan must report
// a race between the producer's refill and the modelled read of the write that still owns those
// bytes. Without this, a model that hid every race would pass unnoticed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../provider_required.h"
#include "testkit/mp_harness.h"
#include "testkit/tsan_transport.h"
#include "testkit/workload_rank.h"
#include "transport/factory.h"

using namespace anyep;
using namespace anyep::testkit;

namespace {

std::string slurp(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
  }
  return text;
}

}  // namespace

TEST(TsanNicModel, RefillBeforeAckIsReported) {
  ASSERT_TRUE(tsan_build()) << "this test is built in TSan builds only";
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  ANYEP_REQUIRE_PROVIDER(transport::available("tcp", &why), "tcp", why);
  char dir[] = "/tmp/anyep-tsan-model-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  RunOptions opt;
  opt.timeout_s = 90;
  opt.kill_all_on_failure = true;
  auto res = run_ranks(
      2,
      [&](Rank& r) {
        // TSan writes its reports to stderr: keep this rank's for the parent to read.
        const std::string path = std::string(dir) + "/rank" + std::to_string(r.rank) + ".err";
        const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        ANYEP_MP_CHECK(fd >= 0 && ::dup2(fd, 2) == 2, "redirect stderr to " + path);
        WorkloadConfig w;
        w.seed = 4242;
        w.ranks = r.size;
        w.producers = 1;
        w.ll_rounds = 24;
        w.ht_chunks = 0;
        w.quiet_every = 1000000;  // a QUIET would order the refill after the post
        w.timeout_s = 20;
        w.refill_before_ack = true;
        proxy::ProxyConfig pc;
        pc.timeout_ns = 20'000'000'000ull;
        run_workload_rank(w, pc, 1, *r.boot, [&](uint32_t) {
          transport::TransportSpec spec;
          spec.name = "tcp";
          spec.rank = r.rank;
          spec.num_ranks = r.size;
          return make_tsan_aware_transport(spec);
        });
      },
      opt);
  std::string reports;
  for (int r = 0; r < 2; ++r) {
    const std::string path = std::string(dir) + "/rank" + std::to_string(r) + ".err";
    reports += "--- rank " + std::to_string(r) + "\n" + slurp(path);
    ::unlink(path.c_str());
  }
  ::rmdir(dir);
  // The race: the producer's refill (fill) against the read the model records at post time.
  EXPECT_NE(reports.find("WARNING: ThreadSanitizer: data race"), std::string::npos) << res.summary() << reports;
  EXPECT_NE(reports.find("tsan_transport.cpp"), std::string::npos) << reports;
  EXPECT_NE(reports.find("StreamWorkload::producer"), std::string::npos) << reports;
}
