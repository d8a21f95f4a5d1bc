#include "args.h"

#include <cstdio>

#include "common/error.h"

namespace anyep::cli {

Parsed parse_args(const Command& cmd, int argc, char** argv, int first) {
  Parsed p;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      p.help = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) throw InvalidArgument("unexpected argument '" + a + "'");
    std::string value;
    bool inline_value = false;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a.resize(eq);
      inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& o : cmd.options)
      if (a == o.name) spec = &o;
    if (spec == nullptr) throw InvalidArgument("unknown option " + a + " (see --help)");
    if (p.has(a)) throw InvalidArgument(a + " is given twice");
    if (spec->value == nullptr) {
      if (inline_value) throw InvalidArgument(a + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= argc) throw InvalidArgument(a + " needs a value (" + spec->value + ")");
      value = argv[++i];
    }
    p.values[a] = value;
  }
  return p;
}

std::string help_text(const Command& cmd) {
  std::string s = std::string("usage: ") + cmd.usage + "\n" + cmd.summary + "\n";
  if (!cmd.options.empty()) s += "\noptions (also --name=value):\n";
  for (const OptionSpec& o : cmd.options) {
    std::string left = std::string("  ") + o.name + (o.value ? std::string(" ") + o.value : "");
    if (left.size() < 24)
      left.resize(24, ' ');
    else
      left += "  ";
    s += left + o.help + "\n";
  }
  s += "  -h, --help              this text\n";
  if (cmd.footer) s += std::string("\n") + cmd.footer;
  return s;
}

std::optional<int> parse_command(const Command& cmd, int argc, char** argv, int first, const char* prog,
                                 const std::function<void(const std::string&, const std::string&)>& each) {
  try {
    const Parsed args = parse_args(cmd, argc, argv, first);
    if (args.help) {
      std::fputs(help_text(cmd).c_str(), stdout);
      return kExitOk;
    }
    for (const auto& [option, value] : args.values) each(option, value);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "%s: %s\n%s", prog, e.what(), help_text(cmd).c_str());
    return kExitUsage;
  }
  return std::nullopt;
}

std::vector<std::string> split_list(const std::string& text,
                                    const std::function<std::string(const std::string&)>& check) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= text.size();) {
    size_t q = text.find(',', p);
    if (q == std::string::npos) q = text.size();
    out.push_back(check(text.substr(p, q - p)));
    p = q + 1;
  }
  return out;
}

}  // namespace anyep::cli
