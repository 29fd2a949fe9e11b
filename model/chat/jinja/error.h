// Errors of the Jinja interpreter. The interpreter is independent of the server: it throws
// jinja::Error, and its users (model/chat_template) map the kinds onto the project's tiers
// (a syntax error -> LoadError, a render error -> RequestError).
#pragma once

#include <stdexcept>
#include <string>

namespace vlm::jinja {

enum class ErrorKind {
  kSyntax,  // the template source does not parse (or uses an unsupported tag, filter or test)
  kRender,  // evaluation failed: a type error, an undefined value used, an unsupported method
  kRaised,  // the template called raise_exception(message)
};

class Error : public std::runtime_error {
 public:
  // line/column: 1-based position in the template source, 0 when not yet known (helpers throw
  // without a position; the evaluator adds the position of the innermost node being evaluated).
  Error(ErrorKind kind, std::string message, int line = 0, int column = 0)
      : std::runtime_error(format(message, line, column)), kind_(kind),
        message_(std::move(message)), line_(line), column_(column) {}

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }  // without the position
  int line() const { return line_; }
  int column() const { return column_; }
  bool has_position() const { return line_ > 0; }
  Error with_position(int line, int column) const { return Error(kind_, message_, line, column); }

 private:
  static std::string format(const std::string& message, int line, int column) {
    if (line <= 0) return message;
    return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message;
  }

  ErrorKind kind_;
  std::string message_;
  int line_;
  int column_;
};

// Shorthand for a render error without a position yet.
[[noreturn]] inline void render_error(std::string message) {
  throw Error(ErrorKind::kRender, std::move(message));
}

}  // namespace vlm::jinja
