// Command-line flags of the vlm-* tools: `--name value` or `--name=value`, names from a table of
// (name, help line). A usage error prints the error, the synopsis and the table to stderr and
// exits with status 2 (the tools' "bad invocation" code).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "engine/compute_dtype.h"

namespace vlm::cli {

// Help lines of --dtype (vlm-server, vlm-generate; vLLM's flag) and of its older alias
// --gemm-activations (f32 = float32, bf16 = bfloat16).
extern const char kDtypeHelp[];
extern const char kGemmActivationsHelp[];

// The --dtype value of `dtype_text` (when non-empty) or of the alias --gemm-activations
// `gemm_text` (when non-empty; "f32" or "bf16"), Auto when both are empty. nullopt with `error`
// set for an unknown value or both flags given.
std::optional<ComputeDType> compute_dtype_from_flags(const std::string& dtype_text, const std::string& gemm_text,
                                                     std::string* error);

using FlagTable = std::map<std::string, std::string>;  // name without "--" -> help line

class FlagParser {
 public:
  FlagParser(std::string synopsis, FlagTable table);

  const FlagTable& table() const { return table_; }
  bool known(const std::string& name) const { return table_.count(name) != 0; }

  // Prints "error: ERROR", "usage: SYNOPSIS" and the flag table to stderr; exits 2.
  [[noreturn]] void fail(const std::string& error) const;

  // name -> value. fail()s on -h/--help, an argument that is not a flag, a flag without a value,
  // a name not in the table, and a name given twice unless last_wins (then the last one counts).
  std::map<std::string, std::string> parse(int argc, char** argv, bool last_wins) const;

  // The whole of `text` as a base-10 integer >= min, else fail("--FLAG needs an integer >= MIN, got 'TEXT'").
  int64_t integer(const std::string& flag, const std::string& text, int64_t min) const;
  // The whole of `text` as a finite number in [lo, hi] ((lo, hi] with lo_open), else fail() naming
  // the flag, the range and the text.
  double number(const std::string& flag, const std::string& text, double lo, double hi, bool lo_open = false) const;

 private:
  std::string synopsis_;
  FlagTable table_;
};

}  // namespace vlm::cli
