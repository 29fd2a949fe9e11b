// A parsed Jinja template (the subset Hugging Face chat templates use). Parsing validates the
// whole template, including filter and test names; rendering is const and thread-safe (each
// call has its own scopes).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/chat/jinja/ast.h"
#include "model/chat/jinja/lexer.h"
#include "model/chat/jinja/value.h"

namespace vlm::jinja {

class Template {
 public:
  // Throws jinja::Error (kSyntax) with the line and column of the first problem.
  static Template parse(std::string_view source, const LexerOptions& options = {});

  // Renders with the given top-level variables (the global functions range, namespace, dict,
  // raise_exception and strftime_now are always available). Throws jinja::Error (kRender or
  // kRaised) with the position of the failing node.
  std::string render(std::vector<std::pair<std::string, Value>> variables) const;

  // The parsed statements (for inspections such as model/chat/chat_content_format.h).
  const Body& body() const { return *body_; }

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace vlm::jinja
