#include "model/chat/jinja/template.h"

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/evaluator.h"
#include "model/chat/jinja/parser.h"

namespace vlm::jinja {

Template Template::parse(std::string_view source, const LexerOptions& options) {
  Template t;
  t.body_ = std::make_shared<const Body>(jinja::parse(tokenize(source, options)));
  return t;
}

std::string Template::render(std::vector<std::pair<std::string, Value>> variables) const {
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  auto root = std::make_shared<Scope>(globals);
  root->vars = std::move(variables);
  Evaluator evaluator;
  return evaluator.render(*body_, root);
}

}  // namespace vlm::jinja
