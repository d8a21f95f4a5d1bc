// src/common/env.cpp: typed readers (each refuses a malformed or out-of-range value with a message
// naming the variable and the value), undeclared names and wrong-type reads, every default valid,
// and docs/environment.md in step with the declared table.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../scoped_env.h"
#include "common/env.h"
#include "common/error.h"
#include "common/fabric_providers.h"

using namespace anyep;

namespace {
using test_support::ScopedEnv;

template <class F>
std::string invalid_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

// `name`='`value`' is refused by `read`, and the message names both (and `also`, when given).
template <class F>
void expect_refused(const char* name, const char* value, F read, const std::string& also = "") {
  ScopedEnv e(name, value);
  const std::string m = invalid_message(read);
  EXPECT_NE(m.find(name), std::string::npos) << name << "='" << value << "': " << m;
  EXPECT_NE(m.find(std::string("'") + value + "'"), std::string::npos) << name << "='" << value << "': " << m;
  if (!also.empty()) {
    EXPECT_NE(m.find(also), std::string::npos) << name << "='" << value << "': " << m;
  }
}

const env::VarInfo& info(const std::string& name) {
  for (const auto& v : env::all_vars())
    if (name == v.name) return v;
  throw std::runtime_error("no " + name);
}
}  // namespace

TEST(Env, CountParsesDecimalOnlyAndEnforcesItsRange) {
  {
    ScopedEnv e("ANYEP_PROXY_THREADS", "45");
    EXPECT_EQ(env::get_count("ANYEP_PROXY_THREADS"), 45);
  }
  {
    ScopedEnv e("ANYEP_PROXY_THREADS", "010");  // decimal, not octal
    EXPECT_EQ(env::get_count("ANYEP_PROXY_THREADS"), 10);
  }
  {
    ScopedEnv e("ANYEP_PROXY_RANKS_PER_HOST", "0");  // 0 is in range where the table says so
    EXPECT_EQ(env::get_count("ANYEP_PROXY_RANKS_PER_HOST"), 0);
  }
  const auto threads = [] { env::get_count("ANYEP_PROXY_THREADS"); };
  for (const char* bad : {"abc", "12x", "1.5", "0x10", "99999999999999999999", " ", " 5", "+5", "5 "})
    expect_refused("ANYEP_PROXY_THREADS", bad, threads);
  // Regression case: 0 threads; and both ends of 1..64.
  for (const char* bad : {"0", "65", "-1", "-99999999999999999999"})
    expect_refused("ANYEP_PROXY_THREADS", bad, threads, "1..64");
  expect_refused(
      "ANYEP_LL_SMS", "-1", [] { env::get_count("ANYEP_LL_SMS"); }, "0..1024");
  expect_refused(
      "ANYEP_FI_NICS", "65", [] { env::get_count("ANYEP_FI_NICS"); }, "0..64");
  expect_refused(
      "ANYEP_CHAOS_MAX_DELAY", "1000001", [] { env::get_count("ANYEP_CHAOS_MAX_DELAY"); }, "0..1000000");
}

TEST(Env, DurationIsFinitePositiveAndBoundedBeforeAnyConversion) {
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "2.5");
    EXPECT_DOUBLE_EQ(env::get_duration_s("ANYEP_TIMEOUT_S"), 2.5);
    EXPECT_EQ(env::get_duration_ns("ANYEP_TIMEOUT_S"), 2'500'000'000ull);
  }
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "86400");  // the upper bound itself
    EXPECT_EQ(env::get_duration_ns("ANYEP_TIMEOUT_S"), 86'400'000'000'000ull);
  }
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "5e-1");
    EXPECT_EQ(env::get_duration_ns("ANYEP_TIMEOUT_S"), 500'000'000ull);
  }
  // Regression cases: -5 (used to disable every timeout), 0 and 1e30 (the float-to-integer
  // cast was undefined). get_duration_ns must refuse them before converting.
  const auto ns = [] { env::get_duration_ns("ANYEP_TIMEOUT_S"); };
  for (const char* bad : {"-5", "0", "1e30", "86401", "-0", "1e-400"})
    expect_refused("ANYEP_TIMEOUT_S", bad, ns, "out of range");
  for (const char* bad : {"2.5s", "x", "1e999", "nan", "inf", "-inf", "0x10", " 1", "1,5"})
    expect_refused("ANYEP_TIMEOUT_S", bad, ns);
}

TEST(Env, BoolAcceptsOnlyTheListedSpellings) {
  for (const char* yes : {"1", "true", "on", "yes"}) {
    ScopedEnv e("ANYEP_LL_CHECK_INPUTS", yes);
    EXPECT_TRUE(env::get_bool("ANYEP_LL_CHECK_INPUTS")) << yes;
  }
  for (const char* no : {"0", "false", "off", "no"}) {
    ScopedEnv e("ANYEP_LL_CHECK_INPUTS", no);
    EXPECT_FALSE(env::get_bool("ANYEP_LL_CHECK_INPUTS")) << no;
  }
  for (const char* bad : {"maybe", "2", "TRUE1"})
    expect_refused("ANYEP_LL_CHECK_INPUTS", bad, [] { env::get_bool("ANYEP_LL_CHECK_INPUTS"); });
}

TEST(Env, EnumAcceptsOnlyItsChoicesAndListsThem) {
  {
    ScopedEnv e("ANYEP_PROXY_ORDERING", "engine");
    EXPECT_EQ(env::get_enum("ANYEP_PROXY_ORDERING"), "engine");
  }
  expect_refused(
      "ANYEP_PROXY_ORDERING", "Engine", [] { env::get_enum("ANYEP_PROXY_ORDERING"); }, "auto, engine, bypass");
  expect_refused(
      "ANYEP_FI_STRIPING", "bites", [] { env::get_enum("ANYEP_FI_STRIPING"); }, "bytes, dest, rr");
  expect_refused(
      "ANYEP_LL_PATH", "nvlink", [] { env::get_enum("ANYEP_LL_PATH"); }, "auto, proxy-cuda-ipc, proxy-libfabric");
  // Regression case: an unknown provider is refused with the known ones, not ignored.
  expect_refused(
      "ANYEP_FI_PROVIDER", "bogus", [] { env::get_enum("ANYEP_FI_PROVIDER"); },
      "(empty), efa, cxi, verbs;ofi_rxm, tcp, tcp;ofi_rxm, shm");
  // Every provider of the table (common/fabric_providers.h) is accepted, and the empty value.
  std::vector<std::string> ok = {""};
  for (const fabric::Provider& p : fabric::kProviders) ok.emplace_back(p.fi_name);
  for (const std::string& v : ok) {
    ScopedEnv e("ANYEP_FI_PROVIDER", v.c_str());
    EXPECT_EQ(env::get_enum("ANYEP_FI_PROVIDER"), v);
  }
}

TEST(Env, SeedIsEmptyOrAnUnsigned64BitInteger) {
  {
    ScopedEnv e("ANYEP_CHAOS_SEED", nullptr);
    EXPECT_FALSE(env::get_seed("ANYEP_CHAOS_SEED").has_value());
  }
  {
    ScopedEnv e("ANYEP_CHAOS_SEED", "42");
    EXPECT_EQ(env::get_seed("ANYEP_CHAOS_SEED"), std::optional<uint64_t>(42));
  }
  {
    ScopedEnv e("ANYEP_CHAOS_SEED", "18446744073709551615");
    EXPECT_EQ(env::get_seed("ANYEP_CHAOS_SEED"), std::optional<uint64_t>(~0ull));
  }
  // Regression case: "garbage" was ignored.
  for (const char* bad : {"garbage", "-1", "1.5", "0x10", "18446744073709551616", " 7"})
    expect_refused("ANYEP_CHAOS_SEED", bad, [] { env::get_seed("ANYEP_CHAOS_SEED"); });
}

TEST(Env, CpuListNamesOnlyCpusThisProcessMayRunOn) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &set)) first = c;
  ASSERT_GE(first, 0);
  {
    ScopedEnv e("ANYEP_PROXY_CPUS", nullptr);
    EXPECT_EQ(env::get_cpu_choice("ANYEP_PROXY_CPUS").mode, env::CpuChoice::Mode::kAuto);
  }
  {
    ScopedEnv e("ANYEP_PROXY_CPUS", "none");
    EXPECT_EQ(env::get_cpu_choice("ANYEP_PROXY_CPUS").mode, env::CpuChoice::Mode::kNone);
  }
  {
    const std::string v = std::to_string(first) + "-" + std::to_string(first) + "," + std::to_string(first);
    ScopedEnv e("ANYEP_PROXY_CPUS", v.c_str());
    const env::CpuChoice c = env::get_cpu_choice("ANYEP_PROXY_CPUS");
    EXPECT_EQ(c.mode, env::CpuChoice::Mode::kList);
    EXPECT_EQ(c.cpus, (std::vector<int>{first, first}));
  }
  const auto read = [] { env::get_cpu_choice("ANYEP_PROXY_CPUS"); };
  // Regression case: CPU 999 on a small machine is refused, naming the CPU.
  if (!CPU_ISSET(999, &set)) {
    expect_refused("ANYEP_PROXY_CPUS", "999", read, "CPU 999");
  }
  expect_refused("ANYEP_PROXY_CPUS", "1000000", read, "CPU 1000000");
  for (const char* bad : {"3-1", "a,b", "0,,1", "0-", "-1", "Auto", "0x1"})
    expect_refused("ANYEP_PROXY_CPUS", bad, read);
}

TEST(Env, UnsetOrEmptyGivesTheDeclaredDefaultAndEveryDefaultIsValid) {
  EXPECT_EQ(info("ANYEP_TIMEOUT_S").default_value, std::string("30"));
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "");
    EXPECT_DOUBLE_EQ(env::get_duration_s("ANYEP_TIMEOUT_S"), 30);
  }
  for (const auto& v : env::all_vars()) {
    ScopedEnv e(v.name, nullptr);
    EXPECT_NO_THROW({
      switch (v.type) {
        case env::Type::kDuration:
          env::get_duration_ns(v.name);
          break;
        case env::Type::kCount:
          env::get_count(v.name);
          break;
        case env::Type::kBool:
          env::get_bool(v.name);
          break;
        case env::Type::kEnum:
          env::get_enum(v.name);
          break;
        case env::Type::kSeed:
          env::get_seed(v.name);
          break;
        case env::Type::kCpuList:
          env::get_cpu_choice(v.name);
          break;
        case env::Type::kSecret:
          env::get_secret(v.name);
          break;
      }
    }) << v.name
       << " default '" << v.default_value << "'";
  }
}

TEST(Env, ReadingAnUndeclaredNameOrWithTheWrongTypeThrows) {
  ScopedEnv e("ANYEP_NOT_DECLARED_ANYWHERE", "1");
  for (int reader = 0; reader < 7; ++reader) {
    try {
      switch (reader) {
        case 0:
          env::get_duration_s("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
        case 1:
          env::get_count("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
        case 2:
          env::get_bool("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
        case 3:
          env::get_enum("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
        case 4:
          env::get_seed("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
        case 5:
          env::get_cpu_choice("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
        case 6:
          env::get_secret("ANYEP_NOT_DECLARED_ANYWHERE");
          break;
      }
      ADD_FAILURE() << "reader " << reader << " accepted an undeclared variable";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("ANYEP_NOT_DECLARED_ANYWHERE"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("env.cpp"), std::string::npos) << err.what();
    }
  }
  try {
    env::get_count("ANYEP_TIMEOUT_S");
    ADD_FAILURE() << "a duration was read as a count";
  } catch (const InternalError& err) {
    EXPECT_NE(std::string(err.what()).find("ANYEP_TIMEOUT_S is declared in src/common/env.cpp as a duration"),
              std::string::npos)
        << err.what();
  }
}

TEST(Env, DeclaredTableIsSortedAndUnique) {
  const auto& vars = env::all_vars();
  ASSERT_FALSE(vars.empty());
  for (size_t i = 1; i < vars.size(); ++i)
    EXPECT_LT(std::string(vars[i - 1].name), std::string(vars[i].name)) << "env.cpp table not sorted/unique at " << i;
}

// docs/environment.md's table lists exactly the names env::all_vars() declares, in order, each with
// its declared default and range.
TEST(Env, DocumentationListsExactlyTheDeclaredVariables) {
  const std::string path = std::string(ANYEP_SOURCE_DIR) + "/docs/environment.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::vector<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    // Table rows look like: | `NAME` | default | range | meaning |
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    ASSERT_NE(end, std::string::npos) << "malformed row in " << path << ": " << line;
    const std::string name = line.substr(3, end - 3);
    documented.push_back(name);
    std::vector<std::string> cells;
    for (size_t pos = line.find('|', end) + 1; pos < line.size();) {
      const size_t bar = line.find(" | ", pos);
      if (bar == std::string::npos) break;
      cells.push_back(line.substr(pos + 1, bar - pos - 1));
      pos = bar + 2;
    }
    ASSERT_GE(cells.size(), 2u) << "row needs default and range cells: " << line;
    for (const auto& v : env::all_vars())
      if (name == v.name) {
        EXPECT_EQ(cells[0], *v.default_value ? v.default_value : "(empty)") << name << " default in " << path;
        EXPECT_EQ(cells[1], env::range_text(v)) << name << " range in " << path;
      }
  }
  std::vector<std::string> declared;
  for (const auto& v : env::all_vars()) declared.push_back(v.name);
  EXPECT_EQ(documented, declared) << "docs/environment.md and src/common/env.cpp list different variables";
  for (const auto& v : env::all_vars()) {
    EXPECT_NE(std::string(v.meaning), "") << v.name;
  }
}

TEST(Env, SecretIsBoundedPrintableAndNeverEchoed) {
  {
    ScopedEnv e("ANYEP_BOOTSTRAP_SECRET", nullptr);
    EXPECT_EQ(env::get_secret("ANYEP_BOOTSTRAP_SECRET"), "");
  }
  {
    ScopedEnv e("ANYEP_BOOTSTRAP_SECRET", "0123abcd-job-7");
    EXPECT_EQ(env::get_secret("ANYEP_BOOTSTRAP_SECRET"), "0123abcd-job-7");
  }
  for (const char* bad :
       {"has space", "tab\there", "0123456789012345678901234567890123456789012345678901234567890123X"}) {
    ScopedEnv e("ANYEP_BOOTSTRAP_SECRET", bad);
    try {
      (void)env::get_secret("ANYEP_BOOTSTRAP_SECRET");
      ADD_FAILURE() << "accepted a bad secret";
    } catch (const InvalidArgument& ex) {
      const std::string msg = ex.what();
      EXPECT_NE(msg.find("ANYEP_BOOTSTRAP_SECRET"), std::string::npos) << msg;
      EXPECT_EQ(msg.find(bad), std::string::npos) << "the message echoes the secret: " << msg;
    }
  }
}
