#include "server/http/router.h"

#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm {

void Router::add(const std::string& method, const std::string& path, Handler handler) {
  routes_[path][method] = std::move(handler);
}

HttpReply Router::dispatch(const HttpRequest& request) const {
  auto path = routes_.find(request.path);
  const Handler* chosen = nullptr;
  if (path != routes_.end())
    if (auto h = path->second.find(request.method); h != path->second.end()) chosen = &h->second;
  if (!chosen && fallback_) chosen = &fallback_;
  if (!chosen && path == routes_.end())
    return HttpReply::error(404, "not_found_error", "no route for " + request.method + " " + request.path);
  if (!chosen) {
    std::string allow;
    for (const auto& [m, h] : path->second) allow += (allow.empty() ? "" : ", ") + m;
    HttpReply r = HttpReply::error(405, "invalid_request_error",
                                   "method " + request.method + " not allowed for " + request.path);
    r.headers.emplace_back("Allow", allow);
    return r;
  }
  try {
    return (*chosen)(request);
  } catch (const RequestError& e) {
    HttpReply r = HttpReply::error(e.status(), e.type(), e.what(), e.param());
    if (e.status() == 503) r.headers.emplace_back("Retry-After", kUnavailableRetryAfter);
    return r;
  } catch (const std::exception& e) {
    VLM_LOG_ERROR("internal error handling {} {}: {}", request.method, request.path, e.what());
    return HttpReply::error(500, "internal_server_error", "internal error; see the server log");
  }
}

}  // namespace vlm
