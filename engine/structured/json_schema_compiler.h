// JSON Schema -> Grammar: the grammar generates only instances the schema accepts (compact
// JSON: no whitespace), so every constrained output validates. Every keyword is either handled
// exactly or refused: an unsupported keyword throws SchemaError naming it, never a looser output.
//
// Supported: type (one or a list), enum, const, properties, required, additionalProperties
// (outputs hold no properties beyond `properties` and `required`), items (one schema),
// minItems, maxItems, anyOf (sibling keywords merged into each branch), $ref to "#..." JSON
// pointers within the schema (definitions, $defs; recursion allowed), minLength, maxLength,
// pattern (engine/structured/regex_compiler.h subset), format uuid / ipv4 (regexes that are
// exact), and the annotations title, description, default, examples, $schema, $id, id,
// $comment, definitions, $defs. Booleans true / {} allow any value.
// Numbers are written with at most 16 integer digits, 15 fraction digits and a 2-digit exponent.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/structured/grammar.h"

namespace vlm::structured {

class SchemaError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The keywords compile_json_schema accepts (README and tests list them from here).
const std::vector<std::string>& supported_schema_keywords();

// Throws SchemaError for an unsupported keyword or value (the message names the keyword and
// its JSON pointer), an unsatisfiable schema, or an unresolvable $ref.
Grammar compile_json_schema(const nlohmann::ordered_json& schema);

// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace vlm::structured
