// The offline per-head sparse-pattern search (MMInference's Algorithm 4, ALGORITHMS.md §4.5),
// shared by vlm-search-patterns' two devices: the candidates, the table of measured figures, the
// selection rule, and the CPU search (the GPU's is model/decoder/cuda/cuda_pattern_search.h).
// Per layer, query head and candidate the search measures the attention-output error against
// dense attention, ||o - o_dense|| / ||o_dense|| over the probed rows, and the kept-block density
// (computed key blocks, gathered columns in block units, over the causal blocks of those rows);
// the selection takes per head the cheapest candidate (lowest density, the first of equals) whose
// error is at most the target, dense when none is (exactness first).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/sparse_prefill/sparse_prefill_config.h"
#include "model/decoder/llm_decoder.h"
#include "model/decoder/modality.h"

namespace vlm {

struct PatternCandidate {
  std::string name;
  HeadPattern pattern;
};

// Sizes scaled to the prompt length N from the paper's Table 3 (its calibration prompt had ~25K
// tokens): dense; A-shape (128, N/16 | N/8 | N/4); vertical-slash (1000, 1024 | 2048 | 4096) *
// N/25000; grid (stride search; lines s, vs, hvs); XAttention (S 8, tau 0.9); with mixed
// modalities Q- and 2D-boundary vertical-slash (1000, 2048) * N/25000. Candidate 0 is dense.
std::vector<PatternCandidate> pattern_candidates(int N, bool mixed);
// Keeps the candidates named in `names` (comma-separated; "dense" always kept). Throws
// std::invalid_argument naming an unknown one.
std::vector<PatternCandidate> select_candidates(const std::vector<PatternCandidate>& all, const std::string& names);

// The calibration prompt: token ids and the modality of each position.
struct PatternSearchPrompt {
  std::vector<int32_t> ids;
  std::vector<ModalityTag> tags;  // [N]
  std::vector<uint8_t> codes;     // [N] Modality as uint8_t (the planners' ChunkView::modalities)
  bool mixed() const;             // some position's modality differs from the first's
};
// Positions [start, start + len) of each video span tagged as video, the rest text.
PatternSearchPrompt make_search_prompt(std::vector<int32_t> ids, const std::vector<std::pair<int, int>>& videos);

struct PatternScore {
  double error = 0;    // relative L2 of the head's output over the probed rows
  double density = 1;  // computed / causal key blocks of the head's plan
};

// What one search measured: scores[layer][candidate][head], and per layer the wall time.
struct PatternSearchTable {
  std::vector<std::vector<std::vector<PatternScore>>> scores;
  std::vector<double> layer_seconds;
  int probe_rows = 0;  // rows measured per head: the last probe_rows positions of the prompt
  int num_keys = 0;    // the prompt's length
};

struct PatternChoice {
  SparseHeadPatterns patterns;                // [layer][head]
  std::vector<std::vector<int>> index;        // [layer][head] the chosen candidate
  std::vector<std::vector<double>> errors;    // [layer][head] its error (0 for dense by default)
};
PatternChoice choose_patterns(const PatternSearchTable& table, const std::vector<PatternCandidate>& cands,
                              double target);

// Causal key blocks of q_len rows at positions [num_keys - q_len, num_keys) in block x block tiles.
double causal_key_blocks(int q_len, int num_keys, int block);

// The CPU search: the decoder's f32 prefill of the whole prompt in one step, its attention probe
// measuring every candidate of every layer's heads over all N rows (CPU dense and block-sparse
// attention, plans from build_sparse_plan). `progress(layer)` (optional) after each layer.
PatternSearchTable search_patterns_cpu(const LlmDecoder& decoder, const PatternSearchPrompt& prompt,
                                       const std::vector<PatternCandidate>& cands, int block,
                                       const std::function<void(int)>& progress = {});

}  // namespace vlm
