// What handlers see and return: a parsed request and a reply that is either complete or a
// stream of chunks (server-sent events). Independent of Beast, so handlers stay plain code.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace vlm {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query as sent
  std::string path;    // target without the query
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string remote;  // "ip:port" of the peer

  // Header value or "" (name in lower case).
  const std::string& header(const std::string& name) const;
};

// A source of response chunks, pulled one at a time by the connection (back-pressure: nothing
// is produced faster than the client reads). next() may call `deliver` on any thread, once per
// call, with the next chunk or nullopt at the end. cancel() is called at most once when the client
// goes away or the server stops; after it, next() is not called again.
class ChunkStream {
 public:
  virtual ~ChunkStream() = default;
  virtual void next(std::function<void(std::optional<std::string>)> deliver) = 0;
  virtual void cancel() = 0;
};

struct HttpReply;

// A complete reply that is not ready yet (e.g. a non-streaming completion waiting for the engine).
// wait() calls `deliver` exactly once, on any thread; cancel() is called at most once when the
// client goes away first.
class DeferredReply {
 public:
  virtual ~DeferredReply() = default;
  virtual void wait(std::function<void(HttpReply)> deliver) = 0;
  virtual void cancel() = 0;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<ChunkStream> stream;  // set: body is ignored, chunks are streamed
  std::string heartbeat;                // stream only: sent when no chunk came for a while
  std::shared_ptr<DeferredReply> deferred;  // set: the real reply comes later

  static HttpReply json(int status, std::string body);
  static HttpReply text(int status, std::string body, std::string content_type = "text/plain; charset=utf-8");
  // The OpenAI error envelope {"error": {"message", "type", "param", "code"}}.
  static HttpReply error(int status, const std::string& type, const std::string& message,
                         const std::string& param = "", const std::string& code = "");
};

}  // namespace vlm
