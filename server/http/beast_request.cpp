#include "server/http/beast_request.h"

#include <cctype>
#include <utility>

namespace vlm {

HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>& msg, std::string remote) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) {
    std::string name(f.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers[name] = std::string(f.value());
  }
  req.body = std::move(msg.body());
  req.remote = std::move(remote);
  return req;
}

}  // namespace vlm
