#include "model/chat/jinja/parser.h"

#include "model/chat/jinja/builtins/builtins.h"
#include "model/chat/jinja/error.h"
#include "model/chat/jinja/parser_impl.h"

namespace vlm::jinja {

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

void Parser::fail(const std::string& message, const Token& at) const {
  throw Error(ErrorKind::kSyntax, message, at.line, at.column);
}

void Parser::fail_unexpected(const Token& at, std::string_view expected) const {
  std::string msg = "unexpected " + describe(at);
  if (!expected.empty()) msg = "expected " + std::string(expected) + ", got " + describe(at);
  fail(msg, at);
}

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

const Token& Parser::expect_op(std::string_view op) {
  if (!is_op(op)) fail_unexpected(cur(), "'" + std::string(op) + "'");
  return next();
}

const Token& Parser::expect_type(TokenType type, std::string_view what) {
  if (cur().type != type) fail_unexpected(cur(), what);
  return next();
}

std::string Parser::expect_name() { return expect_type(TokenType::kName, "a name").text; }

void Parser::expect_block_end() { expect_type(TokenType::kBlockEnd, "end of statement block"); }

Body Parser::parse_template() {
  Body body = parse_body({});
  if (cur().type != TokenType::kEof) fail("unknown tag '" + cur().text + "'", cur());
  return body;
}

Body Parser::parse_body(std::initializer_list<std::string_view> end_tags, const Token* opener) {
  Body body;
  while (true) {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::kText:
        body.push_back(std::make_unique<TextStmt>(pos_of(t), t.text));
        next();
        break;
      case TokenType::kVarBegin: {
        next();
        ExprPtr e = parse_tuple();
        expect_type(TokenType::kVarEnd, "end of print statement");
        body.push_back(std::make_unique<OutputStmt>(pos_of(t), std::move(e)));
        break;
      }
      case TokenType::kBlockBegin: {
        next();
        const Token& name = cur();
        if (name.type != TokenType::kName) fail_unexpected(name, "a tag name");
        for (std::string_view end : end_tags)
          if (name.text == end) return body;
        body.push_back(parse_statement());
        break;
      }
      case TokenType::kEof: {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (std::string_view end : end_tags)
          wanted += (wanted.empty() ? "'" : " or '") + std::string(end) + "'";
        std::string msg = "unexpected end of template, expected " + wanted;
        if (opener) {
          msg += " to close the '" + opener->text + "' at line " + std::to_string(opener->line) +
                 ", column " + std::to_string(opener->column);
        }
        fail(msg, t);
      }
      default: fail_unexpected(t);
    }
  }
}

StmtPtr Parser::parse_statement() {
  DepthGuard guard(*this, cur());
  const Token& tag = next();
  const std::string& name = tag.text;
  if (name == "if") return parse_if(tag);
  if (name == "for") return parse_for(tag);
  if (name == "set") return parse_set(tag);
  if (name == "macro") return parse_macro(tag);
  if (name == "filter") return parse_filter_block(tag);
  if (name == "with") return parse_with(tag);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail("'" + name + "' outside of a loop", tag);
    expect_block_end();
    return std::make_unique<Stmt>(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos_of(tag));
  }
  if (name == "generation") {  // Hugging Face's assistant-mask extension: renders its body
    expect_block_end();
    auto s = std::make_unique<ScopeStmt>(pos_of(tag));
    s->new_scope = false;
    s->body = parse_body({"endgeneration"}, &tag);
    next();
    expect_block_end();
    return s;
  }
  static const char* const kUnsupported[] = {"block", "extends", "include", "import", "from",
                                             "call", "autoescape", "do", "trans", "debug"};
  for (const char* u : kUnsupported)
    if (name == u) fail("the '" + name + "' tag is not supported", tag);
  fail("unknown tag '" + name + "'", tag);
}

StmtPtr Parser::parse_if(const Token& tag) {
  auto s = std::make_unique<IfStmt>(pos_of(tag));
  ExprPtr cond = parse_tuple(false);
  expect_block_end();
  while (true) {
    Body body = parse_body({"elif", "else", "endif"}, &tag);
    s->branches.emplace_back(std::move(cond), std::move(body));
    std::string end = next().text;
    if (end == "elif") {
      cond = parse_tuple(false);
      expect_block_end();
      continue;
    }
    if (end == "else") {
      expect_block_end();
      s->otherwise = parse_body({"endif"}, &tag);
      next();
    }
    expect_block_end();
    return s;
  }
}

std::vector<std::string> Parser::parse_target_names(bool& unpack) {
  std::vector<std::string> names;
  bool parens = skip_op("(");
  unpack = parens;
  while (true) {
    names.push_back(expect_name());
    if (!skip_op(",")) break;
    unpack = true;
    if (cur().type != TokenType::kName) break;  // trailing comma
  }
  if (parens) expect_op(")");
  return names;
}

StmtPtr Parser::parse_for(const Token& tag) {
  auto s = std::make_unique<ForStmt>(pos_of(tag));
  s->targets = parse_target_names(s->unpack);
  if (!skip_name("in")) fail_unexpected(cur(), "'in'");
  s->iterable = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) s->filter = parse_expression();
  if (is_name("recursive")) fail("recursive loops are not supported", cur());
  expect_block_end();
  ++loop_depth_;
  s->body = parse_body({"endfor", "else"}, &tag);
  --loop_depth_;
  if (next().text == "else") {
    expect_block_end();
    s->otherwise = parse_body({"endfor"}, &tag);
    next();
  }
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_set(const Token& tag) {
  if (cur().type == TokenType::kName && is_op(peek(), ".")) {
    auto s = std::make_unique<SetAttrStmt>(pos_of(tag));
    s->object = next().text;
    next();
    s->attr = expect_name();
    expect_op("=");
    s->value = parse_tuple();
    expect_block_end();
    return s;
  }
  bool unpack = false;
  std::vector<std::string> targets = parse_target_names(unpack);
  if (skip_op("=")) {
    auto s = std::make_unique<SetStmt>(pos_of(tag));
    s->targets = std::move(targets);
    s->unpack = unpack;
    s->value = parse_tuple();
    expect_block_end();
    return s;
  }
  if (unpack) fail_unexpected(cur(), "'='");
  auto s = std::make_unique<SetBlockStmt>(pos_of(tag));
  s->target = targets[0];
  while (is_op("|")) {
    const Token& bar = next();
    s->filters.push_back(parse_filter_call(nullptr, bar));
  }
  expect_block_end();
  s->body = parse_body({"endset"}, &tag);
  next();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_macro(const Token& tag) {
  auto s = std::make_unique<MacroStmt>(pos_of(tag));
  s->name = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    std::string param = expect_name();
    ExprPtr def;
    if (skip_op("=")) def = parse_expression();
    s->params.emplace_back(std::move(param), std::move(def));
  }
  next();
  expect_block_end();
  int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_body({"endmacro"}, &tag);
  loop_depth_ = saved;
  next();
  expect_block_end();
  return s;
}

std::unique_ptr<FilterExpr> Parser::parse_filter_call(ExprPtr operand, const Token& at) {
  const Token& name_tok = cur();
  std::string name = expect_name();
  auto f = std::make_unique<FilterExpr>(pos_of(at), std::move(operand));
  f->fn = find_filter(name);
  if (!f->fn) {
    fail(is_jinja_filter(name) ? "the filter '" + name + "' is not supported"
                               : "no filter named '" + name + "'",
         name_tok);
  }
  f->name = std::move(name);
  if (is_op("(")) f->args = parse_call_args();
  return f;
}

StmtPtr Parser::parse_filter_block(const Token& tag) {
  auto s = std::make_unique<FilterBlockStmt>(pos_of(tag));
  s->filters.push_back(parse_filter_call(nullptr, tag));
  while (is_op("|")) {
    const Token& bar = next();
    s->filters.push_back(parse_filter_call(nullptr, bar));
  }
  expect_block_end();
  s->body = parse_body({"endfilter"}, &tag);
  next();
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_with(const Token& tag) {
  auto s = std::make_unique<ScopeStmt>(pos_of(tag));
  while (cur().type != TokenType::kBlockEnd) {
    if (!s->assignments.empty()) expect_op(",");
    std::string name = expect_name();
    expect_op("=");
    s->assignments.emplace_back(std::move(name), parse_expression());
  }
  expect_block_end();
  s->body = parse_body({"endwith"}, &tag);
  next();
  expect_block_end();
  return s;
}

}  // namespace vlm::jinja
