// Conversion of nlohmann JSON (json or ordered_json) to template values. Objects keep the
// JSON's key order: ordered_json keeps the document's order (what Python's json.loads does);
// nlohmann::json has already sorted the keys.
#pragma once

#include <limits>

#include "model/chat/jinja/value.h"

namespace vlm::jinja {

template <typename Json>
Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value(j.template get<bool>());
    case Json::value_t::number_integer: return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Json::value_t::number_float: return Value(j.template get<double>());
    case Json::value_t::string: return Value(j.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return Value::dict(std::move(items));
    }
    default: return Value::none();  // binary / discarded: not produced by the JSON parser
  }
}

}  // namespace vlm::jinja
