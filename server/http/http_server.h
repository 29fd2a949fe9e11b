// HttpServer: Boost.Beast/Asio HTTP/1.1 server. One strand per connection; a pool of I/O threads.
// Per connection: header and body size limits (431 / 413), a read timeout for each request, an
// idle timeout between keep-alive requests, a cap on requests per connection, streaming replies
// written as chunked transfer with back-pressure and heartbeats, and a watch on the socket so a
// client that disconnects mid-stream cancels its stream at once.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http/router.h"

namespace vlm {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: an ephemeral port (see HttpServer::port())
  int num_threads = 2;
  size_t max_body_bytes = 32u << 20;
  size_t max_header_bytes = 16u << 10;
  int read_timeout_ms = 30000;   // to read one whole request
  int idle_timeout_ms = 60000;   // between requests on a keep-alive connection
  int write_timeout_ms = 60000;  // for one write to complete (slow readers); not the waits between a stream's chunks
  int max_requests_per_connection = 1000;
  int heartbeat_ms = 5000;       // streams: heartbeat after this long without a chunk
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, const Router& router);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. Throws LoadError naming host:port on failure.
  void start();
  int port() const { return port_; }
  // Stops accepting new connections; open ones carry on.
  void stop_accepting();
  // Closes every connection (cancelling streams) and joins the threads. Idempotent.
  void stop();
  int active_connections() const;
  int active_requests() const;  // requests being answered (incl. streams and deferred replies)

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace vlm
