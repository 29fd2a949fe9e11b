#include "tests/support/test_http_server.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <thread>

namespace vlm::testing {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct TestHttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::map<std::string, Handler> routes;
  std::atomic<bool> stop{false};
};

namespace {
// A raw HTTP/1.0-style reply: headers with no Content-Length, then the body a byte at a time.
void trickle(tcp::socket& sock, const TestResponse& r) {
  boost::system::error_code ec;
  std::string head = "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Type: " + r.content_type +
                     "\r\nConnection: close\r\n";
  for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
  head += "\r\n";
  asio::write(sock, asio::buffer(head), ec);
  for (size_t i = 0; i < r.body.size() && !ec; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(r.trickle_ms));
    asio::write(sock, asio::buffer(&r.body[i], 1), ec);
  }
  sock.shutdown(tcp::socket::shutdown_both, ec);
}
}  // namespace

TestHttpServer::TestHttpServer(std::map<std::string, Handler> routes) : impl_(std::make_unique<Impl>()) {
  impl_->routes = std::move(routes);
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  thread_ = std::thread([this] {
    while (!impl_->stop) {
      boost::system::error_code ec;
      tcp::socket sock(impl_->io);
      impl_->acceptor.accept(sock, ec);
      if (ec || impl_->stop) break;
      boost::beast::flat_buffer buf;
      http::request<http::string_body> req;
      http::read(sock, buf, req, ec);
      if (ec) continue;
      std::string target(req.target());
      std::string path = target.substr(0, target.find('?'));
      TestResponse r;
      auto it = impl_->routes.find(path);
      if (it == impl_->routes.end()) {
        r.status = 404;
        r.body = "not found";
      } else {
        r = it->second(target);
      }
      if (r.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
      if (r.trickle_ms > 0) {
        trickle(sock, r);
        ++served_;
        continue;
      }
      http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
      res.set(http::field::content_type, r.content_type);
      for (const auto& [k, v] : r.headers) res.set(k, v);
      res.body() = r.body;
      res.keep_alive(false);
      res.prepare_payload();
      http::write(sock, res, ec);
      sock.shutdown(tcp::socket::shutdown_both, ec);
      ++served_;
    }
  });
}

TestHttpServer::~TestHttpServer() {
  impl_->stop = true;
  // Wake the blocking accept with a connection of our own.
  boost::system::error_code ec;
  tcp::socket s(impl_->io);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)), ec);
  thread_.join();
}

std::string TestHttpServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

}  // namespace vlm::testing
