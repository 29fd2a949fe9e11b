// Splits Jinja template source into tokens: template text, the delimiters of {{ }} and
// {% %}, and the expression tokens between them. Comments are dropped. Whitespace control
// follows jinja2: "-" strips all whitespace on that side, "+" disables lstrip_blocks /
// trim_blocks, lstrip_blocks strips spaces and tabs from the line start up to a block or comment
// tag, trim_blocks removes the first newline after one. Newlines are normalized to "\n" and one
// trailing newline is dropped (keep_trailing_newline=False). {% raw %} bodies become text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vlm::jinja {

enum class TokenType {
  kText,
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOperator,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 0;    // 1-based
  int column = 0;  // 1-based, in code points
};

struct LexerOptions {
  bool trim_blocks = true;  // Hugging Face's chat template environment sets both
  bool lstrip_blocks = true;
};

// Throws jinja::Error (kSyntax) with the position of a malformed token or unclosed tag.
// The result always ends with a kEof token.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

// Human-readable token description for parse errors ("'endfor'", "end of print statement").
std::string describe(const Token& token);

}  // namespace vlm::jinja
