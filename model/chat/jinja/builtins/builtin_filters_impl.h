// Internal: the filter table is filled by builtin_filters.cpp (strings, numbers, JSON) and
// builtin_filters_seq.cpp (sequences and mappings).
#pragma once

#include <string_view>
#include <unordered_map>

#include "model/chat/jinja/ast.h"

namespace vlm::jinja {

using FilterTable = std::unordered_map<std::string_view, FilterFn>;

void register_scalar_filters(FilterTable& table);
void register_sequence_filters(FilterTable& table);

}  // namespace vlm::jinja
