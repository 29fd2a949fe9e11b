// Fuzzes HTTP request parsing as server/http_server does it: Beast's request_parser with the
// server's header and body limits (HttpServerOptions defaults, body limit shrunk), fed the
// bytes as they might arrive on a keep-alive connection (several requests back to back, in
// pieces whose sizes come from the input), each parsed request turned into an HttpRequest the
// same way (lower-case header names, path without the query) and dispatched through a Router
// whose chat route runs the real OpenAI conversion. A 500 (an exception other than
// RequestError escaping a handler) is a finding.
#include <cctype>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "fuzz/fuzz_util.h"
#include "server/http/beast_request.h"
#include "server/http/http_server.h"
#include "server/openai_request.h"
#include "server/http/router.h"

namespace http = boost::beast::http;

namespace {
const vlm::Router& router() {
  static vlm::Router r = [] {
    vlm::Router r;
    r.add("GET", "/health", [](const vlm::HttpRequest&) { return vlm::HttpReply::text(200, "ok"); });
    r.add("POST", "/v1/chat/completions", [](const vlm::HttpRequest& req) {
      vlm::parse_api_request(vlm::ApiKind::Chat, req.body, {});
      return vlm::HttpReply::json(200, "{}");
    });
    r.add("POST", "/v1/completions", [](const vlm::HttpRequest& req) {
      vlm::parse_api_request(vlm::ApiKind::Completion, req.body, {});
      return vlm::HttpReply::json(200, "{}");
    });
    return r;
  }();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const vlm::HttpServerOptions defaults;
  const size_t piece = 1 + data[0] % 64;  // bytes per simulated read
  const char* p = reinterpret_cast<const char*>(data + 1);
  const char* end = reinterpret_cast<const char*>(data + size);
  boost::beast::flat_buffer buffer;
  for (int message = 0; message < 8; ++message) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(4096);
    parser.header_limit(static_cast<std::uint32_t>(defaults.max_header_bytes));
    boost::beast::error_code ec;
    while (!parser.is_done()) {
      if (buffer.size() > 0) {
        // As Beast's reads: async_read_header parses lazily, async_read (the body) eagerly.
        parser.eager(parser.is_header_done());
        size_t used = parser.put(buffer.data(), ec);
        buffer.consume(used);
        if (ec == http::error::need_more) {
          ec = {};
        } else if (ec) {
          return 0;  // the server answers 400 / 413 / 431 and closes
        } else if (used > 0) {
          continue;
        }
      }
      if (parser.is_done()) break;
      if (p == end) {  // the peer closed (Beast's read: end_of_stream before any byte)
        if (!parser.got_some()) return 0;
        parser.put_eof(ec);
        if (ec || !parser.is_done()) return 0;
        break;
      }
      size_t n = std::min(piece, static_cast<size_t>(end - p));
      auto b = buffer.prepare(n);
      std::memcpy(b.data(), p, n);
      buffer.commit(n);
      p += n;
    }
    auto msg = parser.release();
    vlm::HttpRequest req = vlm::to_http_request(msg, "127.0.0.1:1");
    vlm::HttpReply reply = router().dispatch(req);
    if (reply.status >= 500) {
      std::fprintf(stderr, "fuzz: %d for %s %s: %s\n", reply.status, req.method.c_str(),
                   req.target.c_str(), reply.body.c_str());
      std::abort();
    }
    if (!msg.keep_alive()) return 0;
  }
  return 0;
}
