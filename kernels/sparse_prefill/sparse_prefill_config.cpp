#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {

std::optional<SparsePrefillMethod> parse_sparse_prefill_method(std::string_view name) {
  std::string n(name);
  for (char& c : n)
    if (c == '-') c = '_';
  if (n == "off" || n == "dense") return SparsePrefillMethod::Off;
  if (n == "a_shape") return SparsePrefillMethod::AShape;
  if (n == "tri_shape") return SparsePrefillMethod::TriShape;
  if (n == "vertical_slash") return SparsePrefillMethod::VerticalSlash;
  return std::nullopt;
}

const char* sparse_prefill_method_name(SparsePrefillMethod m) {
  switch (m) {
    case SparsePrefillMethod::Off: return "off";
    case SparsePrefillMethod::AShape: return "a_shape";
    case SparsePrefillMethod::TriShape: return "tri_shape";
    case SparsePrefillMethod::VerticalSlash: return "vertical_slash";
  }
  return "?";
}

}  // namespace vlm
