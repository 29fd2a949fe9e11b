// The web playground: a chat page for trying the served model in a browser (server/webui/assets:
// plain HTML, CSS and JavaScript modules, embedded in the binary at build time by
// embed_assets.cmake, so the page needs no network beyond this server).
//   GET /           the page (assets/index.html)
//   GET /ui/NAME    every other file of assets/ (app.js, app.css, ...)
// Every reply carries a strict Content-Security-Policy (only this origin's scripts and styles, no
// inline script, Trusted Types required for DOM sinks, no framing) and the usual hardening headers;
// an ETag lets browsers revalidate (If-None-Match -> 304). The page calls the API with relative
// URLs, so it also works behind a proxy (docker/deploy/nginx.conf). vlm-server --no-webui leaves
// these routes out (then / answers 404).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "server/http/router.h"

namespace vlm {

// One embedded file (generated table, see embed_assets.cmake).
struct WebAsset {
  const char* name;            // file name in assets/, e.g. "app.js"
  const unsigned char* data;
  size_t size;
};
std::span<const WebAsset> web_assets();

// Content type for a file name by its extension ("application/octet-stream" if unknown).
std::string web_content_type(std::string_view name);

// Registers GET / and GET /ui/NAME for every asset but index.html.
void register_web_ui(Router& router);

}  // namespace vlm
