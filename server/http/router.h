// Routes (method, exact path) to handlers. Unknown paths answer 404 and a known path with another
// method answers 405 with an Allow header, both in the OpenAI error envelope (unless a fallback
// handler is set). A handler that throws RequestError answers with that error (a 503 with
// Retry-After: kUnavailableRetryAfter); any other exception answers 500 and is logged.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "server/http/http_types.h"

namespace vlm {

// Seconds a client should wait before retrying a 503 (model loading, server draining).
inline constexpr const char* kUnavailableRetryAfter = "5";

class Router {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  void add(const std::string& method, const std::string& path, Handler handler);
  // Answers every request no route takes (unknown path or method) instead of the 404 / 405.
  void set_fallback(Handler handler) { fallback_ = std::move(handler); }
  HttpReply dispatch(const HttpRequest& request) const;

 private:
  std::map<std::string, std::map<std::string, Handler>> routes_;  // path -> method -> handler
  Handler fallback_;
};

}  // namespace vlm
