// fetch_media against a real HTTP server on 127.0.0.1: limits, redirects, refused addresses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/core/check.h"
#include "server/http/base64.h"
#include "server/media/media_fetch.h"
#include "tests/support/test_http_server.h"

namespace vlm {
namespace {

using testing::TestHttpServer;
using testing::TestResponse;

std::string error_of(const std::string& url, const MediaFetchOptions& o) {
  try {
    fetch_media(url, o);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "image_url");
    return e.what();
  }
  return "";
}

TEST(Base64, RoundTripAndStrictness) {
  for (std::string s : {"", "a", "ab", "abc", "abcd", "\x00\xff\x10 binary"}) {
    auto d = base64_decode(base64_encode(s));
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(*d, s);
  }
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  EXPECT_EQ(*base64_decode("aGVs\nbG8="), "hello");
  EXPECT_FALSE(base64_decode("aGVsbG8").has_value());    // truncated quantum
  EXPECT_FALSE(base64_decode("aGV*bG8=").has_value());   // bad symbol
  EXPECT_FALSE(base64_decode("aGVsbG8=aGVs").has_value());  // data after padding
  EXPECT_FALSE(base64_decode("a===").has_value());
  EXPECT_FALSE(base64_decode("aGVsbG8=", 4).has_value());  // over the byte limit
}

TEST(MediaFetch, InternalAddresses) {
  for (const char* ip : {"127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
                         "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255",
                         "::1", "::", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
                         "64:ff9b::a9fe:a9fe", "ff02::1", "not-an-ip"})
    EXPECT_TRUE(is_internal_address(ip)) << ip;
  for (const char* ip : {"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111",
                         "::ffff:8.8.8.8"})
    EXPECT_FALSE(is_internal_address(ip)) << ip;
}

TEST(MediaFetch, DataUrls) {
  MediaFetchOptions o;
  MediaBytes m = fetch_media("data:image/png;base64," + base64_encode("PNGDATA"), o);
  EXPECT_EQ(m.data, "PNGDATA");
  EXPECT_EQ(m.mime_type, "image/png");
  EXPECT_NE(error_of("data:image/png;base64,@@@@", o).find("invalid base64"), std::string::npos);
  EXPECT_NE(error_of("data:image/png,raw", o).find("must be base64"), std::string::npos);
  EXPECT_NE(error_of("data:image/png;base64", o).find("no ','"), std::string::npos);
  o.max_bytes = 4;
  EXPECT_NE(error_of("data:image/png;base64," + base64_encode("too many bytes"), o).find("larger than the limit"),
            std::string::npos);
}

class MediaFetchHttp : public ::testing::Test {
 protected:
  TestHttpServer server{{
      {"/img", [](const std::string&) { return TestResponse{200, "image/jpeg", "JPEGBYTES"}; }},
      {"/big", [](const std::string&) { return TestResponse{200, "image/png", std::string(5000, 'x')}; }},
      {"/slow", [](const std::string&) { return TestResponse{200, "image/png", "late", {}, 1500}; }},
      {"/missing", [](const std::string&) { return TestResponse{404, "text/plain", "no"}; }},
      {"/r1", [this](const std::string&) { return redirect("/img"); }},
      {"/r2", [this](const std::string&) { return redirect("/r1"); }},
      {"/r3", [this](const std::string&) { return redirect("/r2"); }},
      {"/r4", [this](const std::string&) { return redirect("/r3"); }},
      {"/to_localhost", [this](const std::string&) {
         return TestResponse{302, "text/plain", "", {{"Location", "http://localhost:" + std::to_string(server.port()) + "/img"}}};
       }},
  }};
  TestResponse redirect(const std::string& to) { return TestResponse{302, "text/plain", "", {{"Location", server.url(to)}}}; }
  MediaFetchOptions allowed() {
    MediaFetchOptions o;
    o.allowed_domains = {"127.0.0.1"};
    return o;
  }
};

TEST_F(MediaFetchHttp, LoopbackRefusedUnlessAllowed) {
  MediaFetchOptions o;
  EXPECT_NE(error_of(server.url("/img"), o).find("internal address (127.0.0.1)"), std::string::npos);
  EXPECT_EQ(server.requests_served(), 0) << "the refused fetch must not connect";
  MediaBytes m = fetch_media(server.url("/img"), allowed());
  EXPECT_EQ(m.data, "JPEGBYTES");
  EXPECT_EQ(m.mime_type, "image/jpeg");
}

TEST_F(MediaFetchHttp, RedirectsAreLimitedAndRechecked) {
  EXPECT_EQ(fetch_media(server.url("/r3"), allowed()).data, "JPEGBYTES");
  EXPECT_NE(error_of(server.url("/r4"), allowed()).find("redirected more than 3 times"), std::string::npos);
  EXPECT_NE(error_of(server.url("/to_localhost"), allowed()).find("'localhost' is not in the allowed media domains"),
            std::string::npos);
}

TEST_F(MediaFetchHttp, LimitsAndFailures) {
  MediaFetchOptions o = allowed();
  o.max_bytes = 1000;
  EXPECT_NE(error_of(server.url("/big"), o).find("larger than the limit of 1000"), std::string::npos);
  o.total_timeout_ms = 300;
  EXPECT_NE(error_of(server.url("/slow"), o).find("timed out"), std::string::npos);
  EXPECT_NE(error_of(server.url("/missing"), allowed()).find("HTTP 404"), std::string::npos);
  EXPECT_NE(error_of("ftp://127.0.0.1/x", allowed()).find("scheme 'ftp' is not allowed"), std::string::npos);
  EXPECT_NE(error_of("http://", allowed()).find("invalid media URL"), std::string::npos);
  MediaFetchOptions other;
  other.allowed_domains = {"example.com"};
  EXPECT_NE(error_of(server.url("/img"), other).find("not in the allowed media domains"), std::string::npos);
}

TEST(MediaFetch, LocalFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("vlm_media_" + std::to_string(::getpid()));
  fs::create_directories(dir / "ok");
  std::ofstream(dir / "ok" / "a.png") << "PNG";
  std::ofstream(dir / "secret.txt") << "secret";
  MediaFetchOptions o;
  EXPECT_NE(error_of("file://" + (dir / "ok" / "a.png").string(), o).find("not allowed"), std::string::npos);
  o.allowed_local_path = (dir / "ok").string();
  EXPECT_EQ(fetch_media("file://" + (dir / "ok" / "a.png").string(), o).data, "PNG");
  EXPECT_NE(error_of("file://" + (dir / "ok" / ".." / "secret.txt").string(), o).find("outside"), std::string::npos);
  EXPECT_NE(error_of("file://" + (dir / "ok" / "nope.png").string(), o).find("not found"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vlm
