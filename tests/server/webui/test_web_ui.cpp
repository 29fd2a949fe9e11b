// The web playground's routes (server/webui) on a real vlm-server: GET / and GET /ui/NAME answer
// the files of server/webui/assets byte for byte, with their content types, a strict
// Content-Security-Policy and the other hardening headers; If-None-Match with the ETag gives 304;
// other paths under /ui/ are 404. --no-webui (bare, llama.cpp's spelling) leaves / unanswered
// while the API still works. (The page itself is tested in a browser: tests/webui.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "server/webui/web_ui.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kAssets = fs::path(VLM_FIXTURES_DIR) / "../../server/webui/assets";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::vector<std::string> demo_args() {
  return {"--model", demo_model_dir(), "--max-model-len", "256", "--num-kv-blocks", "64", "--log-level", "warn"};
}

TEST(WebUi, ServesEveryAssetWithItsTypeAndSecurityHeaders) {
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server", demo_args());
  int files = 0;
  for (const auto& e : fs::directory_iterator(kAssets)) {
    const std::string name = e.path().filename().string();
    const std::string url = server.base_url() + (name == "index.html" ? "/" : "/ui/" + name);
    const HttpResult r = http_request("GET", url, "", {});
    ASSERT_EQ(r.status, 200) << url;
    EXPECT_EQ(r.body, read_file(e.path())) << url;
    const std::string h = lower(r.headers);
    EXPECT_NE(h.find("content-type: " + lower(web_content_type(name))), std::string::npos) << url << "\n" << r.headers;
    EXPECT_NE(h.find("content-security-policy: default-src 'none'; script-src 'self'; style-src 'self';"), std::string::npos) << r.headers;
    EXPECT_NE(h.find("require-trusted-types-for 'script'"), std::string::npos) << r.headers;
    EXPECT_NE(h.find("frame-ancestors 'none'"), std::string::npos) << r.headers;
    EXPECT_NE(h.find("x-content-type-options: nosniff"), std::string::npos) << r.headers;
    EXPECT_NE(h.find("x-frame-options: deny"), std::string::npos) << r.headers;
    EXPECT_NE(h.find("referrer-policy: no-referrer"), std::string::npos) << r.headers;

    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.headers, m, std::regex("[Ee][Tt][Aa][Gg]: (\"[^\"]+\")"))) << r.headers;
    const HttpResult again = http_request("GET", url, "", {"If-None-Match: " + m[1].str()});
    EXPECT_EQ(again.status, 304) << url;
    EXPECT_TRUE(again.body.empty());
    EXPECT_EQ(http_request("GET", url, "", {"If-None-Match: \"other\""}).status, 200);
    ++files;
  }
  EXPECT_GE(files, 5);
  EXPECT_EQ(files, static_cast<int>(web_assets().size()));
  EXPECT_EQ(http_request("GET", server.base_url() + "/ui/missing.js", "", {}).status, 404);
  EXPECT_EQ(http_request("GET", server.base_url() + "/ui/index.html", "", {}).status, 404);  // the page is at /
  EXPECT_EQ(http_request("POST", server.base_url() + "/", "{}").status, 405);
}

TEST(WebUi, NoWebuiLeavesRootUnanswered) {
  std::vector<std::string> args = demo_args();
  args.push_back("--no-webui");  // bare: ServerProcess appends --host and --port after it
  ServerProcess server(std::string(VLM_BIN_DIR) + "/vlm-server", args);
  EXPECT_EQ(http_request("GET", server.base_url() + "/", "", {}).status, 404);
  EXPECT_EQ(http_request("GET", server.base_url() + "/ui/app.js", "", {}).status, 404);
  EXPECT_EQ(http_request("GET", server.base_url() + "/v1/models", "", {}).status, 200);
}

TEST(WebUi, ContentTypes) {
  EXPECT_EQ(web_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(web_content_type("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(web_content_type("app.css"), "text/css; charset=utf-8");
  EXPECT_EQ(web_content_type("icon.svg"), "image/svg+xml");
  EXPECT_EQ(web_content_type("notes"), "application/octet-stream");
}

}  // namespace
}  // namespace vlm::testing
