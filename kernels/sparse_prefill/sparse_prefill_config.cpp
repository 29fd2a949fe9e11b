#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {
namespace {
std::string underscored(std::string_view name) {
  std::string n(name);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}
}  // namespace

std::optional<SparsePrefillMethod> parse_sparse_prefill_method(std::string_view name) {
  const std::string n = underscored(name);
  if (n == "off" || n == "dense") return SparsePrefillMethod::Off;
  if (n == "a_shape") return SparsePrefillMethod::AShape;
  if (n == "tri_shape") return SparsePrefillMethod::TriShape;
  if (n == "vertical_slash") return SparsePrefillMethod::VerticalSlash;
  if (n == "grid") return SparsePrefillMethod::Grid;
  if (n == "xattention") return SparsePrefillMethod::XAttention;
  if (n == "mminference") return SparsePrefillMethod::MMInference;
  return std::nullopt;
}

const char* sparse_prefill_method_name(SparsePrefillMethod m) {
  switch (m) {
    case SparsePrefillMethod::Off: return "off";
    case SparsePrefillMethod::AShape: return "a_shape";
    case SparsePrefillMethod::TriShape: return "tri_shape";
    case SparsePrefillMethod::VerticalSlash: return "vertical_slash";
    case SparsePrefillMethod::Grid: return "grid";
    case SparsePrefillMethod::XAttention: return "xattention";
    case SparsePrefillMethod::MMInference: return "mminference";
  }
  return "?";
}

const char* head_pattern_type_name(HeadPatternType t) {
  switch (t) {
    case HeadPatternType::Dense: return "dense";
    case HeadPatternType::AShape: return "a_shape";
    case HeadPatternType::VerticalSlash: return "vertical_and_slash";
    case HeadPatternType::Grid: return "grid";
    case HeadPatternType::XAttention: return "xattention";
  }
  return "?";
}

std::optional<HeadPatternType> parse_head_pattern_type(std::string_view name) {
  const std::string n = underscored(name);
  if (n == "dense") return HeadPatternType::Dense;
  if (n == "a_shape" || n == "stream_llm") return HeadPatternType::AShape;
  if (n == "vertical_and_slash" || n == "vertical_slash") return HeadPatternType::VerticalSlash;
  if (n == "grid") return HeadPatternType::Grid;
  if (n == "xattention") return HeadPatternType::XAttention;
  return std::nullopt;
}

bool plannable_without_host_data(const SparsePrefillConfig& cfg) {
  // Vertical-slash and boundary heads estimate on the GPU from cfg.last_q <= 64 rows; XAttention
  // over 64-token blocks (its stride divides them).
  auto xattention_ok = [](const XAttentionParams& x) { return x.stride > 0 && 64 % x.stride == 0; };
  auto head_ok = [&](const HeadPattern& h) {
    return (h.boundary == BoundaryKind::None || cfg.last_q <= 64) &&
           (h.type == HeadPatternType::Dense || h.type == HeadPatternType::AShape ||
            (h.type == HeadPatternType::Grid && h.grid.last_q <= 64) ||
            (h.type == HeadPatternType::VerticalSlash && cfg.last_q <= 64) ||
            (h.type == HeadPatternType::XAttention && h.boundary == BoundaryKind::None &&
             xattention_ok(h.xattention)));
  };
  switch (cfg.method) {
    case SparsePrefillMethod::Off:
    case SparsePrefillMethod::AShape:
    case SparsePrefillMethod::TriShape: return true;
    case SparsePrefillMethod::VerticalSlash: return cfg.last_q <= 64;
    case SparsePrefillMethod::Grid: return cfg.grid.last_q <= 64;
    case SparsePrefillMethod::XAttention: return xattention_ok(cfg.xattention);
    case SparsePrefillMethod::MMInference:
      if (!head_ok(cfg.default_head)) return false;
      if (cfg.head_patterns)
        for (const auto& layer : cfg.head_patterns->layers)
          for (const HeadPattern& h : layer)
            if (!head_ok(h)) return false;
      return true;
    default: return false;
  }
}

bool uses_xattention_heads(const SparsePrefillConfig& cfg) {
  if (cfg.method == SparsePrefillMethod::XAttention) return true;
  if (cfg.method != SparsePrefillMethod::MMInference) return false;
  if (cfg.default_head.type == HeadPatternType::XAttention) return true;
  if (cfg.head_patterns)
    for (const auto& layer : cfg.head_patterns->layers)
      for (const HeadPattern& h : layer)
        if (h.type == HeadPatternType::XAttention) return true;
  return false;
}

}  // namespace vlm
