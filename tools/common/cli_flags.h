// Command-line flags of the vlm-* tools: `--name value` or `--name=value`, names from a table of
// (name, help line); `-tp N` is vLLM's short form of `--tensor-parallel-size N`. A usage error prints the error, the synopsis and the table to stderr and
// exits with status 2 (the tools' "bad invocation" code).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace vlm::cli {

using FlagTable = std::map<std::string, std::string>;  // name without "--" -> help line

// True when an argument is -h or --help (tools print their usage to stdout and exit 0).
bool help_requested(int argc, char** argv);

struct Flag {
  std::string name;   // without "--"
  std::string value;  // "" for a switch
};

class FlagParser {
 public:
  FlagParser(std::string synopsis, FlagTable table);

  const FlagTable& table() const { return table_; }
  bool known(const std::string& name) const { return table_.count(name) != 0; }

  // Prints "error: ERROR", "usage: SYNOPSIS" and the flag table to stderr; exits 2.
  [[noreturn]] void fail(const std::string& error) const;
  // Prints "usage: SYNOPSIS" and the flag table to stdout; exits 0 (-h / --help).
  [[noreturn]] void help() const;

  // name -> value. help()s on -h/--help; fail()s on an argument that is not a flag, a flag without a value,
  // a name not in the table, and a name given twice unless last_wins (then the last one counts).
  std::map<std::string, std::string> parse(int argc, char** argv, bool last_wins) const;

  // Every flag in command-line order, repeats kept (for flags a tool may give several times,
  // such as --prompt). Names in `switches` take no value (`--chat`); the rest as parse().
  // fail()s as parse() does, except on repeats.
  std::vector<Flag> parse_list(int argc, char** argv, const std::set<std::string>& switches = {}) const;

  // The whole of `text` as a base-10 integer >= min, else fail("--FLAG needs an integer >= MIN, got 'TEXT'").
  int64_t integer(const std::string& flag, const std::string& text, int64_t min) const;
  // The whole of `text` as a finite number in [lo, hi] ((lo, hi] with lo_open), else fail() naming
  // the flag, the range and the text.
  double number(const std::string& flag, const std::string& text, double lo, double hi, bool lo_open = false) const;

 private:
  void print_usage(std::FILE* out) const;
  std::string synopsis_;
  FlagTable table_;
};

// Runs a tool's body and maps the three error tiers to its exit status: LoadError 1
// ("error: ..."), RequestError 2 (input the tool refuses), any other exception 3
// ("internal error: ..."). Returns the body's status otherwise.
int run_tool(const std::function<int()>& body);

}  // namespace vlm::cli
