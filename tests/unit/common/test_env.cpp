// src/common/env.cpp: typed readers, undeclared names, and docs/environment.md in step with the
// declared table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "common/env.h"
#include "common/error.h"

using namespace anyep;

namespace {
// Sets a variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

template <class F>
std::string invalid_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}
}  // namespace

TEST(Env, IntReaderParsesAndRejectsNamingTheVariable) {
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "45");
    EXPECT_EQ(env::get_int("ANYEP_TIMEOUT_S"), 45);
  }
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "010");  // decimal, not octal
    EXPECT_EQ(env::get_int("ANYEP_TIMEOUT_S"), 10);
  }
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "-3");
    EXPECT_EQ(env::get_int("ANYEP_TIMEOUT_S"), -3);
  }
  for (const char* bad : {"abc", "12x", "1.5", "0x10", "99999999999999999999", " "}) {
    ScopedEnv e("ANYEP_TIMEOUT_S", bad);
    const std::string m = invalid_message([] { env::get_int("ANYEP_TIMEOUT_S"); });
    EXPECT_NE(m.find("ANYEP_TIMEOUT_S"), std::string::npos) << bad << ": " << m;
    EXPECT_NE(m.find(bad), std::string::npos) << bad << ": " << m;
  }
}

TEST(Env, UnsetOrEmptyGivesTheDeclaredDefault) {
  std::string def;
  for (const auto& v : env::all_vars())
    if (std::string(v.name) == "ANYEP_TIMEOUT_S") def = v.default_value;
  ASSERT_FALSE(def.empty());
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "");
    EXPECT_EQ(env::get_int("ANYEP_TIMEOUT_S"), std::stoll(def));
    EXPECT_EQ(env::get_string("ANYEP_TIMEOUT_S"), def);
  }
}

TEST(Env, DoubleAndBoolReadersRejectMalformedValues) {
  {
    ScopedEnv e("ANYEP_TIMEOUT_S", "2.5");
    EXPECT_DOUBLE_EQ(env::get_double("ANYEP_TIMEOUT_S"), 2.5);
  }
  for (const char* bad : {"2.5s", "x", "1e999", "nan", "inf"}) {
    ScopedEnv e("ANYEP_TIMEOUT_S", bad);
    const std::string m = invalid_message([] { env::get_double("ANYEP_TIMEOUT_S"); });
    EXPECT_NE(m.find("ANYEP_TIMEOUT_S"), std::string::npos) << bad << ": " << m;
  }
  for (const char* yes : {"1", "true", "on", "yes"}) {
    ScopedEnv e("ANYEP_LL_CHECK_INPUTS", yes);
    EXPECT_TRUE(env::get_bool("ANYEP_LL_CHECK_INPUTS")) << yes;
  }
  for (const char* no : {"0", "false", "off", "no"}) {
    ScopedEnv e("ANYEP_LL_CHECK_INPUTS", no);
    EXPECT_FALSE(env::get_bool("ANYEP_LL_CHECK_INPUTS")) << no;
  }
  for (const char* bad : {"maybe", "2", "TRUE1"}) {
    ScopedEnv e("ANYEP_LL_CHECK_INPUTS", bad);
    const std::string m = invalid_message([] { env::get_bool("ANYEP_LL_CHECK_INPUTS"); });
    EXPECT_NE(m.find("ANYEP_LL_CHECK_INPUTS"), std::string::npos) << bad << ": " << m;
  }
}

TEST(Env, ReadingAnUndeclaredNameThrows) {
  ScopedEnv e("ANYEP_NOT_DECLARED_ANYWHERE", "1");
  for (int reader = 0; reader < 4; ++reader) {
    try {
      switch (reader) {
        case 0: env::get_string("ANYEP_NOT_DECLARED_ANYWHERE"); break;
        case 1: env::get_int("ANYEP_NOT_DECLARED_ANYWHERE"); break;
        case 2: env::get_bool("ANYEP_NOT_DECLARED_ANYWHERE"); break;
        case 3: env::get_double("ANYEP_NOT_DECLARED_ANYWHERE"); break;
      }
      ADD_FAILURE() << "reader " << reader << " accepted an undeclared variable";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("ANYEP_NOT_DECLARED_ANYWHERE"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("env.cpp"), std::string::npos) << err.what();
    }
  }
}

TEST(Env, DeclaredTableIsSortedAndUnique) {
  const auto& vars = env::all_vars();
  ASSERT_FALSE(vars.empty());
  for (size_t i = 1; i < vars.size(); ++i)
    EXPECT_LT(std::string(vars[i - 1].name), std::string(vars[i].name)) << "env.cpp table not sorted/unique at " << i;
}

// docs/environment.md's table lists exactly the names env::all_vars() declares, in order.
TEST(Env, DocumentationListsExactlyTheDeclaredVariables) {
  const std::string path = std::string(ANYEP_SOURCE_DIR) + "/docs/environment.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::vector<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    // Table rows look like: | `NAME` | default | meaning |
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    ASSERT_NE(end, std::string::npos) << "malformed row in " << path << ": " << line;
    documented.push_back(line.substr(3, end - 3));
  }
  std::vector<std::string> declared;
  for (const auto& v : env::all_vars()) declared.push_back(v.name);
  EXPECT_EQ(documented, declared) << "docs/environment.md and src/common/env.cpp list different variables";
  for (const auto& v : env::all_vars()) {
    EXPECT_NE(std::string(v.meaning), "") << v.name;
  }
}
