// anyep/cli/args.h — the CLI's command lines: every option is declared (name, value or flag,
// help line); values are parsed with the strict parsers of src/common/parse.h by the command.
// "--name value" and "--name=value" both work; "-h"/"--help" is recognised everywhere; an
// unknown option, a missing value or a stray argument is an InvalidArgument naming it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anyep::cli {

struct OptionSpec {
  const char* name;   // "--ranks"
  const char* value;  // "R" (the placeholder in the help); nullptr: a flag without a value
  const char* help;   // one line, the default in brackets at the end
};

struct Command {
  const char* usage;    // "anyep bench proxy [options]"
  const char* summary;  // what it does, a few lines
  std::vector<OptionSpec> options;
  const char* footer = nullptr;  // exit status and notes
};

struct Parsed {
  bool help = false;
  std::map<std::string, std::string> values;  // option -> value ("" for a flag)
  bool has(const std::string& name) const { return values.count(name) != 0; }
  const std::string* get(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? nullptr : &it->second;
  }
};

// Parses argv[first..argc) against `cmd`. Throws InvalidArgument naming the problem.
Parsed parse_args(const Command& cmd, int argc, char** argv, int first);
// The help text of `cmd`.
std::string help_text(const Command& cmd);

// A command's whole command line: prints the help on -h/--help (returns kExitOk), or the refusal
// and the help on a bad command line (kExitUsage); otherwise calls `each(option, value)` for every
// option given, which parses the value and may throw InvalidArgument (a bad command line too), and
// returns nullopt: the command goes on.
std::optional<int> parse_command(const Command& cmd, int argc, char** argv, int first, const char* prog,
                                 const std::function<void(const std::string&, const std::string&)>& each);

// "a,b,c" -> {"a", "b", "c"}, each checked by `check` (e.g. a parse_choice).
std::vector<std::string> split_list(const std::string& text,
                                    const std::function<std::string(const std::string&)>& check);

// Exit statuses of every command.
constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitCannotRun = 77;

}  // namespace anyep::cli
