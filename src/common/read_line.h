// anyep/src/common/read_line.h — the first line of a small system file (/proc, /sys), with C stdio.
// Library code avoids iostreams: inside the torch extension they crashed on the device (a second
// libstdc++ copy in the module, docs/ll.md), and a file read needs nothing more.
#pragma once

#include <cstdio>
#include <string>

namespace anyep {

// The first line without its newline; empty if the file cannot be read.
inline std::string read_first_line(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return {};
  char buf[4096];
  std::string line;
  if (std::fgets(buf, sizeof buf, f)) line = buf;
  std::fclose(f);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace anyep
