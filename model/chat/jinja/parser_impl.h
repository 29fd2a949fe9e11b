// Internal: the recursive-descent parser shared by parser.cpp (statements) and
// parser_expr.cpp (expressions). See parser.h for the grammar.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat/jinja/ast.h"
#include "model/chat/jinja/lexer.h"

namespace vlm::jinja {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  Body parse_template();

 private:
  // --- tokens
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  static Position pos_of(const Token& t) { return {t.line, t.column}; }
  bool is_op(std::string_view op) const { return is_op(cur(), op); }
  static bool is_op(const Token& t, std::string_view op) {
    return t.type == TokenType::kOperator && t.text == op;
  }
  bool is_name(std::string_view name) const { return is_name(cur(), name); }
  static bool is_name(const Token& t, std::string_view name) {
    return t.type == TokenType::kName && t.text == name;
  }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  const Token& expect_op(std::string_view op);
  const Token& expect_type(TokenType type, std::string_view what);
  std::string expect_name();
  [[noreturn]] void fail(const std::string& message, const Token& at) const;
  [[noreturn]] void fail_unexpected(const Token& at, std::string_view expected = {}) const;

  // --- statements (parser.cpp)
  // Parses until a block tag whose name is in end_tags; leaves the position on that name.
  Body parse_body(std::initializer_list<std::string_view> end_tags, const Token* opener = nullptr);
  StmtPtr parse_statement();
  StmtPtr parse_if(const Token& tag);
  StmtPtr parse_for(const Token& tag);
  StmtPtr parse_set(const Token& tag);
  StmtPtr parse_macro(const Token& tag);
  StmtPtr parse_filter_block(const Token& tag);
  StmtPtr parse_with(const Token& tag);
  std::unique_ptr<FilterExpr> parse_filter_call(ExprPtr operand, const Token& at);
  void expect_block_end();
  std::vector<std::string> parse_target_names(bool& unpack);

  // --- expressions (parser_expr.cpp)
  ExprPtr parse_tuple(bool with_condexpr = true, bool explicit_parens = false,
                      std::initializer_list<std::string_view> extra_end_names = {});
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr object, const Token& at);
  ExprPtr parse_test(ExprPtr operand, const Token& at);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  Arguments parse_call_args();

  // Bounds the recursion of nested expressions and blocks (the parser's stack).
  class DepthGuard {
   public:
    DepthGuard(Parser& p, const Token& at) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail("template nested too deeply", at);
    }
    ~DepthGuard() { --p_.depth_; }

   private:
    Parser& p_;
  };
  static constexpr int kMaxDepth = 200;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // for break/continue outside a loop
  int depth_ = 0;
};

}  // namespace vlm::jinja
