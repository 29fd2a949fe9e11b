#include "server/http/http_server.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <set>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "server/http/beast_request.h"

namespace vlm {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

class HttpSession;

struct HttpServer::Impl {
  HttpServerOptions options;
  const Router& router;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<std::shared_ptr<HttpSession>> sessions;
  std::atomic<int> active_requests{0};
  bool stopped = false;

  Impl(HttpServerOptions o, const Router& r) : options(std::move(o)), router(r) {}
  void accept();
  void remove(const std::shared_ptr<HttpSession>& s) {
    std::lock_guard<std::mutex> lock(mu);
    sessions.erase(s);
  }
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), server_(server), opt_(server.options), heartbeat_timer_(stream_.get_executor()) {
    boost::system::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void start() { asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); }); }

  // From any thread: close the connection, cancelling what it is doing.
  void close() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->shutdown(); });
  }

 private:
  void read_request() {
    parser_.emplace();
    parser_->body_limit(opt_.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(opt_.max_header_bytes));
    stream_.expires_after(milliseconds(num_requests_ == 0 ? opt_.read_timeout_ms : opt_.idle_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    stream_.expires_after(milliseconds(opt_.read_timeout_ms));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit)
      return send_and_close(HttpReply::error(413, "invalid_request_error",
                                             "request body larger than " + std::to_string(opt_.max_body_bytes) + " bytes"));
    if (ec == http::error::header_limit)
      return send_and_close(HttpReply::error(431, "invalid_request_error", "request headers too large"));
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset)
      return shutdown();
    if (ec.category() == beast::error_code(http::error::bad_target).category())  // any other parse error
      return send_and_close(HttpReply::error(400, "invalid_request_error", "malformed HTTP request: " + ec.message()));
    shutdown();
  }

  void on_read(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    ++num_requests_;
    auto& msg = parser_->get();
    HttpRequest req = to_http_request(msg, remote_);
    log_method_ = req.method;
    log_path_ = req.path;
    log_start_ = std::chrono::steady_clock::now();
    log_bytes_ = 0;
    log_first_chunk_ms_ = -1;
    keep_alive_ = msg.keep_alive() && num_requests_ < opt_.max_requests_per_connection;
    ++server_.active_requests;
    in_request_ = true;
    HttpReply reply = server_.router.dispatch(req);
    respond(std::move(reply));
  }

  void respond(HttpReply reply) {
    if (reply.deferred) {
      deferred_ = reply.deferred;
      watch_disconnect();
      deferred_->wait([self = shared_from_this()](HttpReply r) {
        asio::post(self->stream_.get_executor(), [self, r = std::move(r)]() mutable {
          if (!self->deferred_) return;  // cancelled meanwhile
          self->deferred_.reset();
          self->respond(std::move(r));
        });
      });
      return;
    }
    log_status_ = reply.status;
    if (reply.stream) return start_stream(std::move(reply));
    log_bytes_ = reply.body.size();
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status), 11);
    res->set(http::field::content_type, reply.content_type);
    for (const auto& [k, v] : reply.headers) res->set(k, v);
    res->body() = std::move(reply.body);
    res->keep_alive(keep_alive_);
    res->prepare_payload();
    arm_write_timeout();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      self->request_done();
      if (ec || !self->keep_alive_) return self->shutdown();
      self->read_request();
    });
  }

  void send_and_close(HttpReply reply) {
    keep_alive_ = false;
    log_start_ = std::chrono::steady_clock::now();
    log_first_chunk_ms_ = -1;
    ++server_.active_requests;
    in_request_ = true;
    respond(std::move(reply));
  }

  void start_stream(HttpReply reply) {
    stream_src_ = std::move(reply.stream);
    heartbeat_ = std::move(reply.heartbeat);
    auto res = std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(reply.status), 11);
    res->set(http::field::content_type, reply.content_type);
    res->set(http::field::cache_control, "no-cache");
    res->set("X-Accel-Buffering", "no");
    for (const auto& [k, v] : reply.headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->chunked(true);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    arm_write_timeout();
    http::async_write_header(stream_, *sr, [self = shared_from_this(), res, sr](beast::error_code ec, size_t) {
      self->stream_.expires_never();  // the wait for the first chunk is not a write (heartbeats fill it)
      if (ec) return self->shutdown();
      self->watch_disconnect();
      self->pull_chunk();
    });
  }

  void pull_chunk() {
    if (!stream_src_) return;
    const uint64_t ticket = ++pull_ticket_;
    arm_heartbeat(ticket);
    stream_src_->next([self = shared_from_this(), ticket](std::optional<std::string> chunk) {
      asio::post(self->stream_.get_executor(), [self, ticket, chunk = std::move(chunk)]() mutable {
        if (!self->stream_src_ || ticket != self->pull_ticket_) return;
        self->heartbeat_timer_.cancel();
        self->write_chunk(std::move(chunk));
      });
    });
  }

  void arm_heartbeat(uint64_t ticket) {
    if (heartbeat_.empty()) return;
    heartbeat_timer_.expires_after(milliseconds(opt_.heartbeat_ms));
    heartbeat_timer_.async_wait([self = shared_from_this(), ticket](beast::error_code ec) {
      if (ec || !self->stream_src_ || ticket != self->pull_ticket_ || self->writing_) return;
      auto data = std::make_shared<std::string>(self->heartbeat_);
      self->writing_ = true;
      self->arm_write_timeout();
      asio::async_write(self->stream_, http::make_chunk(asio::buffer(*data)),
                        [self, data, ticket](beast::error_code ec, size_t) {
                          self->writing_ = false;
                          self->stream_.expires_never();
                          if (ec) return self->shutdown();
                          if (ticket == self->pull_ticket_) self->arm_heartbeat(ticket);
                          if (self->pending_) {
                            auto c = std::move(*self->pending_);
                            self->pending_.reset();
                            self->write_chunk(std::move(c));
                          }
                        });
    });
  }

  void write_chunk(std::optional<std::string> chunk) {
    if (writing_) {  // a heartbeat is in flight: write after it
      pending_ = std::move(chunk);
      return;
    }
    arm_write_timeout();
    if (!chunk) {
      stream_src_.reset();
      asio::async_write(stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, size_t) {
        self->request_done();
        if (ec || !self->keep_alive_) return self->shutdown();
        self->read_request();
      });
      return;
    }
    auto data = std::make_shared<std::string>(std::move(*chunk));
    log_bytes_ += data->size();
    writing_ = true;
    asio::async_write(stream_, http::make_chunk(asio::buffer(*data)), [self = shared_from_this(), data](beast::error_code ec, size_t) {
      self->writing_ = false;
      self->stream_.expires_never();  // nor is the wait for the next one
      if (ec) return self->shutdown();
      if (self->log_first_chunk_ms_ < 0) self->log_first_chunk_ms_ = self->ms_since_start();
      self->pull_chunk();
    });
  }

  // The write timeout covers one write (a reader too slow to take it), armed just before it;
  // the completion handlers of stream writes disarm it, so the waits between a stream's chunks
  // (a long prefill before the first token) are never cut by it.
  void arm_write_timeout() { stream_.expires_after(milliseconds(opt_.write_timeout_ms)); }

  // Completes when the peer sends bytes or closes; with nothing to read it has closed.
  void watch_disconnect() {
    // A wait left over from an earlier request on this keep-alive connection completes when the
    // next request's bytes arrive; by then they may have been read, so it must not judge this one.
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), seq = num_requests_](beast::error_code ec) {
      if (ec || seq != self->num_requests_ || (!self->stream_src_ && !self->deferred_)) return;
      // Readiness alone does not mean the peer left: epoll is edge-triggered, and an edge from
      // request bytes that the read already consumed can complete this wait afterwards (seen
      // behind nginx under load: a live request closed, nginx answered 502). Peek: 0 = the peer
      // closed; EAGAIN = nothing there, wait again; data = a pipelined request, read after this reply.
      char byte;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_disconnect();
      if (n <= 0) {
        VLM_LOG_DEBUG("client {} disconnected mid-request", self->remote_);
        self->shutdown();
      }
    });
  }

  // One structured access-log line per answered request (info level).
  // A stream's line also gives when its first data chunk was in the socket (the time to first token
  // as the server sees it: from the request's last byte read).
  void log_access() const {
    VLM_LOG_INFO("access remote={} method={} path={} status={} bytes={} duration_ms={:.1f}{}{}", remote_,
                 log_method_.empty() ? "-" : log_method_, log_path_.empty() ? "-" : log_path_, log_status_,
                 log_bytes_, ms_since_start(),
                 log_first_chunk_ms_ >= 0 ? fmt::format(" first_chunk_ms={:.2f}", log_first_chunk_ms_) : "",
                 closed_ ? " closed_early=1" : "");
  }

  double ms_since_start() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - log_start_).count();
  }

  void request_done() {
    if (in_request_) {
      in_request_ = false;
      log_access();
      --server_.active_requests;
    }
  }

  void shutdown() {
    if (closed_) return;
    closed_ = true;
    heartbeat_timer_.cancel();
    if (stream_src_) std::exchange(stream_src_, nullptr)->cancel();
    if (deferred_) std::exchange(deferred_, nullptr)->cancel();
    request_done();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    server_.remove(shared_from_this());
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  const HttpServerOptions& opt_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;
  int num_requests_ = 0;
  bool keep_alive_ = false;
  bool in_request_ = false;
  bool closed_ = false;
  std::shared_ptr<ChunkStream> stream_src_;
  std::shared_ptr<DeferredReply> deferred_;
  std::string heartbeat_;
  asio::steady_timer heartbeat_timer_;
  uint64_t pull_ticket_ = 0;
  bool writing_ = false;
  std::optional<std::optional<std::string>> pending_;
  // Access log of the current request.
  std::string log_method_, log_path_;
  int log_status_ = 0;
  size_t log_bytes_ = 0;
  std::chrono::steady_clock::time_point log_start_ = std::chrono::steady_clock::now();
  double log_first_chunk_ms_ = -1;  // a stream's first data chunk written, ms after log_start_
};

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      VLM_LOG_WARN("accept failed: {}", ec.message());
    } else {
      // No Nagle: a stream writes its header, then each chunk, as separate small writes; with
      // Nagle a chunk that follows the header within a few ms waited for the client's delayed
      // ACK (up to 40 ms on Linux), which was most of a prefix-cache hit's time to first token.
      beast::error_code nodelay_ec;
      socket.set_option(tcp::no_delay(true), nodelay_ec);
      auto s = std::make_shared<HttpSession>(std::move(socket), *this);
      {
        std::lock_guard<std::mutex> lock(mu);
        sessions.insert(s);
      }
      s->start();
    }
    accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, const Router& router)
    : impl_(std::make_unique<Impl>(std::move(options), router)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  auto& o = impl_->options;
  const std::string where = o.host + ":" + std::to_string(o.port);
  try {
    tcp::endpoint ep(asio::ip::make_address(o.host), static_cast<unsigned short>(o.port));
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen(asio::socket_base::max_listen_connections);
    port_ = impl_->acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw LoadError(where + ": cannot listen: " + e.code().message());
  }
  impl_->accept();
  for (int i = 0; i < std::max(1, o.num_threads); ++i) impl_->threads.emplace_back([this] { impl_->io.run(); });
}

void HttpServer::stop_accepting() {
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  stop_accepting();
  std::vector<std::shared_ptr<HttpSession>> open;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    open.assign(impl_->sessions.begin(), impl_->sessions.end());
  }
  for (auto& s : open) s->close();
  // Let the closes run (they cancel streams, so the engine frees their requests), then stop.
  for (int i = 0; i < 200 && active_connections() > 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sessions.clear();
}

int HttpServer::active_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->sessions.size());
}

int HttpServer::active_requests() const { return impl_->active_requests.load(); }

}  // namespace vlm
