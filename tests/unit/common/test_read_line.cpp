// read_first_line: the first line of a small system file, without its line end; empty when the
// file cannot be read.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/read_line.h"

namespace anyep {
namespace {

std::string temp_file(const char* content) {
  char path[] = "/tmp/anyep-read-line-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  std::FILE* f = fdopen(fd, "w");
  std::fputs(content, f);
  std::fclose(f);
  return path;
}

TEST(ReadFirstLine, FirstLineWithoutItsEnd) {
  const std::string p = temp_file("0-3,8\nsecond line\n");
  EXPECT_EQ(read_first_line(p), "0-3,8");
  std::remove(p.c_str());
}

TEST(ReadFirstLine, NoTrailingNewlineAndCarriageReturn) {
  const std::string a = temp_file("6a1f-boot-id");
  EXPECT_EQ(read_first_line(a), "6a1f-boot-id");
  std::remove(a.c_str());
  const std::string b = temp_file("value\r\n");
  EXPECT_EQ(read_first_line(b), "value");
  std::remove(b.c_str());
}

TEST(ReadFirstLine, MissingFileIsEmpty) { EXPECT_EQ(read_first_line("/nonexistent/anyep/read-line-test"), ""); }

TEST(ReadFirstLine, RealSystemFile) {
  // Present on every Linux machine this runs on; a boot id is 36 characters, no line end.
  const std::string id = read_first_line("/proc/sys/kernel/random/boot_id");
  if (id.empty()) GTEST_SKIP() << "/proc/sys/kernel/random/boot_id is not readable here";
  EXPECT_EQ(id.size(), 36u);
}

}  // namespace
}  // namespace anyep
