// Routes (method, exact path) to handlers. Unknown paths answer 404 and a known path with another
// method answers 405 with an Allow header, both in the OpenAI error envelope. A handler that
// throws RequestError answers with that error; any other exception answers 500 and is logged.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "server/http/http_types.h"

namespace vlm {

class Router {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  void add(const std::string& method, const std::string& path, Handler handler);
  HttpReply dispatch(const HttpRequest& request) const;

 private:
  std::map<std::string, std::map<std::string, Handler>> routes_;  // path -> method -> handler
};

}  // namespace vlm
