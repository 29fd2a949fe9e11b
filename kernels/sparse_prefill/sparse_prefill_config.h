// SparsePrefillConfig: which sparse-prefill pattern a sequence's prefill chunks use and its
// parameters (defaults from shared/ALGORITHMS.md §1-§5). Method Off is the exact dense path.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vlm {

enum class SparsePrefillMethod { Off, AShape, TriShape, VerticalSlash };

// "off" (or "dense"), "a_shape", "tri_shape", "vertical_slash" (also with '-' for '_').
std::optional<SparsePrefillMethod> parse_sparse_prefill_method(std::string_view name);
const char* sparse_prefill_method_name(SparsePrefillMethod m);

struct SparsePrefillConfig {
  SparsePrefillMethod method = SparsePrefillMethod::Off;
  int min_prompt_len = 4096;  // shorter prompts stay dense (sparse prefill only pays off long)
  int block = 64;             // query and key block size of the plans (BLOCK_M = BLOCK_N)
  // A-shape / tri-shape (MInference defaults): sink tokens, local window, dense last rows.
  int n_init = 128;
  int n_local = 3968;
  int n_last = 100;
  // Vertical-slash: top-k verticals / slashes estimated from the last last_q queries.
  int vertical_size = 1000;
  int slash_size = 6096;
  int last_q = 64;

  bool enabled() const { return method != SparsePrefillMethod::Off; }
};

}  // namespace vlm
