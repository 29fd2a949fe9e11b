// Errors, in three tiers (shared/DESIGN.md, principle 6):
//  - InternalError: a broken invariant inside the program; raised by VLM_CHECK with file:line,
//    the failed condition and the values the caller formats into the message.
//  - LoadError: a file or IO operation failed; the message names the file and the operation.
//  - RequestError: one request is bad (HTTP status + OpenAI error type); only that request fails.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vlm {

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RequestError : public std::runtime_error {
 public:
  // status: HTTP status code (400, 404, 413, ...); type: OpenAI error type
  // ("invalid_request_error", ...); param: the offending request field, or empty.
  RequestError(int status, std::string type, std::string message, std::string param = {})
      : std::runtime_error(std::move(message)), status_(status), type_(std::move(type)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string type_;
  std::string param_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);

namespace detail {
inline std::string check_message() { return {}; }
template <typename... Args>
std::string check_message(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace vlm

// VLM_CHECK(cond) or VLM_CHECK(cond, "fmt {}", values...): throws vlm::InternalError.
#define VLM_CHECK(cond, ...)                                                         \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::vlm::check_failed(__FILE__, __LINE__, #cond,                                 \
                          ::vlm::detail::check_message(__VA_ARGS__));                \
  } while (0)
