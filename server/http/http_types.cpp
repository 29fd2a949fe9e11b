#include "server/http/http_types.h"

#include <nlohmann/json.hpp>

namespace vlm {

const std::string& HttpRequest::header(const std::string& name) const {
  static const std::string kEmpty;
  auto it = headers.find(name);
  return it == headers.end() ? kEmpty : it->second;
}

HttpReply HttpReply::json(int status, std::string body) {
  HttpReply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpReply HttpReply::text(int status, std::string body, std::string content_type) {
  HttpReply r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

HttpReply HttpReply::error(int status, const std::string& type, const std::string& message,
                           const std::string& param, const std::string& code) {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  else e["code"] = status;
  // Messages can quote raw request bytes (the path of a 404): invalid UTF-8 becomes U+FFFD
  // rather than a throw from dump() (fuzz_http_request found that crashing the I/O thread).
  return json(status, nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace vlm
