// A parsed Boost.Beast request as the router sees it (HttpRequest): method, target, path
// (target without the query), headers with lower-case names, body, and the peer's address.
// Shared by the connection code (server/http/http_server.cpp) and the HTTP fuzzer, so the fuzzer
// exercises the server's own conversion.
#pragma once

#include <string>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http/http_types.h"

namespace vlm {

// Moves the body out of `msg`.
HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>& msg, std::string remote);

}  // namespace vlm
