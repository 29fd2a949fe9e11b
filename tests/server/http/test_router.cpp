// Router::dispatch without a socket: 404 / 405 without a fallback; with one (the loading server's,
// ApiServer::register_loading_routes) every path and method gets the fallback's answer, and a
// handler's 503 RequestError carries Retry-After.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "server/api_server.h"
#include "server/http/router.h"

namespace vlm {
namespace {

HttpRequest request(const std::string& method, const std::string& path) {
  HttpRequest r;
  r.method = method;
  r.path = r.target = path;
  return r;
}

std::string header(const HttpReply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(Router, NoRouteAndWrongMethodWithoutAFallback) {
  Router router;
  router.add("GET", "/a", [](const HttpRequest&) { return HttpReply::json(200, "{}"); });
  EXPECT_EQ(router.dispatch(request("GET", "/a")).status, 200);
  EXPECT_EQ(router.dispatch(request("GET", "/b")).status, 404);
  const HttpReply wrong = router.dispatch(request("POST", "/a"));
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(header(wrong, "Allow"), "GET");
}

TEST(Router, LoadingRoutesAnswer503EverywhereWithRetryAfter) {
  Router router;
  ApiServer::register_loading_routes(router);
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"GET", "/v1/models"}, {"GET", "/health"},
           {"POST", "/tokenize"}, {"POST", "/detokenize"}, {"GET", "/metrics"}, {"GET", "/"}, {"DELETE", "/x"}}) {
    SCOPED_TRACE(method + " " + path);
    const HttpReply r = router.dispatch(request(method, path));
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(header(r, "Retry-After"), kUnavailableRetryAfter);
    const auto j = nlohmann::json::parse(r.body);
    EXPECT_EQ(j["error"]["type"], "unavailable_error");
    EXPECT_EQ(j["error"]["message"], "model is loading");
  }
}

TEST(Router, A503RequestErrorCarriesRetryAfter) {
  Router router;
  router.add("GET", "/busy", [](const HttpRequest&) -> HttpReply {
    throw RequestError(503, "unavailable_error", "server is shutting down");
  });
  router.add("GET", "/bad", [](const HttpRequest&) -> HttpReply { throw RequestError(400, "invalid_request_error", "no"); });
  const HttpReply busy = router.dispatch(request("GET", "/busy"));
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(header(busy, "Retry-After"), kUnavailableRetryAfter);
  const HttpReply bad = router.dispatch(request("GET", "/bad"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(header(bad, "Retry-After"), "");
}

}  // namespace
}  // namespace vlm
