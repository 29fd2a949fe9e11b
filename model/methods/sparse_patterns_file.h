// The per-model sparse-prefill pattern file (ALGORITHMS.md §4.6; written by
// tools/vlm-search-patterns, read by the server's --sparse-prefill-config): per layer, per query
// head, the head's pattern and boundary type.
//
// Ours (version 1):
//   {"version": 1, "model": "...", "layers": [ {"<q_head>": HEAD, ...}, ... ]}
//   HEAD = {"boundary": "none" | "q" | "2d",
//           "pattern": ["dense"] | ["a_shape", n_init, n_local] | ["vertical_and_slash", v, s]
//                    | ["grid", band, max_stride] | ["xattention", stride, threshold],
//           "stride": "auto" | INT   (grid: online search, or a fixed stride),
//           "lines": "hvs"           (grid: which lines, default all three),
//           "boundary_sizes": [v, s] (q / 2d heads: per-modality vertical-slash sizes;
//                                     default the pattern's own when it is vertical_and_slash,
//                                     else 1000, 6096),
//           "score": x               (informational)}
//   §4.6's "patterns": {"vision": P, "text": P, ...} is accepted for "pattern" (vision first).
// MInference's list (§3.6): [ {"<q_head>": [type, a, b, score], ...}, ... ] maps to boundary
// "none" ("stream_llm" = a_shape).
#pragma once

#include <string>

#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {

// Throws LoadError naming the file (unreadable, invalid JSON, unknown pattern or boundary).
SparseHeadPatterns load_sparse_patterns(const std::string& path);

// The file text (ours, version 1) of `patterns`; scores[layer][head] optional (empty: none).
std::string sparse_patterns_to_json(const SparseHeadPatterns& patterns, const std::string& model,
                                    const std::vector<std::vector<double>>& scores = {});

}  // namespace vlm
