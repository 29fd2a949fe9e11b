#include "server/webui/web_ui.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

namespace vlm {
namespace {

// The page's scripts and styles come from this origin only (no inline code, no eval); the
// model's words reach the DOM as text only, and Trusted Types makes any HTML sink (innerHTML,
// document.write, ...) throw. Images and video frames the user attaches are data: and blob: URLs.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "media-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'";

std::string etag_of(const WebAsset& a) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (size_t i = 0; i < a.size; ++i) h = (h ^ a.data[i]) * 1099511628211ull;
  return fmt::format("\"{:016x}-{}\"", h, a.size);
}

Router::Handler asset_handler(const WebAsset& a) {
  auto etag = std::make_shared<const std::string>(etag_of(a));
  const std::string type = web_content_type(a.name);
  return [&a, etag, type](const HttpRequest& req) {
    const bool fresh = req.header("if-none-match") == *etag;
    std::string body = fresh ? "" : std::string(reinterpret_cast<const char*>(a.data), a.size);
    HttpReply r = HttpReply::text(fresh ? 304 : 200, std::move(body), type);
    r.headers = {{"Content-Security-Policy", kContentSecurityPolicy},
                 {"X-Content-Type-Options", "nosniff"},
                 {"X-Frame-Options", "DENY"},
                 {"Referrer-Policy", "no-referrer"},
                 {"Cross-Origin-Opener-Policy", "same-origin"},
                 {"Cross-Origin-Resource-Policy", "same-origin"},
                 {"Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()"},
                 {"Cache-Control", "no-cache"},
                 {"ETag", *etag}};
    return r;
  };
}

}  // namespace

std::string web_content_type(std::string_view name) {
  static constexpr std::pair<std::string_view, const char*> kTypes[] = {
      {".html", "text/html; charset=utf-8"},  {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},    {".svg", "image/svg+xml"},
      {".png", "image/png"},                  {".json", "application/json"}};
  for (const auto& [ext, type] : kTypes)
    if (name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext) return type;
  return "application/octet-stream";
}

void register_web_ui(Router& router) {
  for (const WebAsset& a : web_assets())
    router.add("GET", a.name == std::string_view("index.html") ? "/" : fmt::format("/ui/{}", a.name), asset_handler(a));
}

}  // namespace vlm
