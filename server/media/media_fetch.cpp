#include "server/media/media_fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>

#include "kernels/core/check.h"
#include "server/http/base64.h"

namespace vlm {
namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(400, "invalid_request_error", message, param);
}

bool v4_internal(uint32_t a /* host order */) {
  auto in = [&](uint32_t net, int bits) { return (a >> (32 - bits)) == (net >> (32 - bits)); };
  return in(0x00000000, 8) ||   // 0.0.0.0/8 "this network"
         in(0x0a000000, 8) ||   // 10/8
         in(0x64400000, 10) ||  // 100.64/10 CGNAT
         in(0x7f000000, 8) ||   // loopback
         in(0xa9fe0000, 16) ||  // link-local (cloud metadata lives here)
         in(0xac100000, 12) ||  // 172.16/12
         in(0xc0000000, 24) ||  // 192.0.0/24 protocol assignments
         in(0xc0a80000, 16) ||  // 192.168/16
         in(0xc6120000, 15) ||  // 198.18/15 benchmarking
         in(0xe0000000, 4) ||   // multicast
         in(0xf0000000, 4);     // reserved + broadcast
}

bool v6_internal(const unsigned char* b) {
  static const unsigned char zero[16] = {};
  if (std::memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1)) return true;  // :: and ::1
  const bool mapped = std::memcmp(b, zero, 10) == 0 && b[10] == 0xff && b[11] == 0xff;
  const bool nat64 = b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b &&
                     std::memcmp(b + 4, zero, 8) == 0;
  if (mapped || nat64) {
    const uint32_t v4 = (uint32_t{b[12]} << 24) | (uint32_t{b[13]} << 16) | (uint32_t{b[14]} << 8) | b[15];
    return v4_internal(v4);
  }
  if ((b[0] & 0xfe) == 0xfc) return true;                 // fc00::/7 unique local
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return true;  // fe80::/10 link-local
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return true;  // fec0::/10 site-local (deprecated)
  if (b[0] == 0xff) return true;                            // multicast
  return false;
}

struct FetchState {
  bool allow_internal = false;
  bool refused = false;
  std::string refused_ip;
  int64_t max_bytes = 0;
  bool too_big = false;
  std::string body;
};

curl_socket_t open_socket(void* clientp, curlsocktype purpose, struct curl_sockaddr* addr) {
  auto* st = static_cast<FetchState*>(clientp);
  char ip[INET6_ADDRSTRLEN] = {};
  bool internal = true;
  if (addr->family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&addr->addr);
    inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
    internal = v4_internal(ntohl(sin->sin_addr.s_addr));
  } else if (addr->family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&addr->addr);
    inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof ip);
    internal = v6_internal(sin6->sin6_addr.s6_addr);
  }
  if (purpose != CURLSOCKTYPE_IPCXN || (internal && !st->allow_internal)) {
    st->refused = true;
    st->refused_ip = ip;
    return CURL_SOCKET_BAD;
  }
  return socket(addr->family, addr->socktype, addr->protocol);
}

size_t on_data(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* st = static_cast<FetchState*>(userdata);
  const size_t n = size * nmemb;
  if (static_cast<int64_t>(st->body.size() + n) > st->max_bytes) {
    st->too_big = true;
    return 0;  // aborts the transfer
  }
  st->body.append(ptr, n);
  return n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct UrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// Scheme and host of an absolute URL; refuses anything but http/https.
std::pair<std::string, std::string> scheme_and_host(const std::string& url, const std::string& param) {
  std::unique_ptr<CURLU, UrlDeleter> u(curl_url());
  if (curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) bad(param, "invalid media URL");
  char* scheme = nullptr;
  char* host = nullptr;
  curl_url_get(u.get(), CURLUPART_SCHEME, &scheme, 0);
  curl_url_get(u.get(), CURLUPART_HOST, &host, 0);
  std::string s = scheme ? scheme : "", h = host ? host : "";
  curl_free(scheme);
  curl_free(host);
  if (s != "http" && s != "https") bad(param, "media URL scheme '" + s + "' is not allowed (http, https, data)");
  if (!h.empty() && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return {s, h};
}

MediaBytes fetch_data_url(const std::string& url, const MediaFetchOptions& o, const std::string& param) {
  const size_t comma = url.find(',');
  if (comma == std::string::npos) bad(param, "malformed data URL: no ','");
  std::string meta = url.substr(5, comma - 5);  // after "data:"
  const bool is_b64 = meta.size() >= 7 && meta.compare(meta.size() - 7, 7, ";base64") == 0;
  if (!is_b64) bad(param, "data URLs must be base64 encoded (data:<mime>;base64,...)");
  MediaBytes m;
  m.mime_type = meta.substr(0, meta.size() - 7);
  auto decoded = base64_decode(std::string_view(url).substr(comma + 1), static_cast<size_t>(o.max_bytes));
  if (!decoded) {
    if ((url.size() - comma - 1) / 4 * 3 > static_cast<size_t>(o.max_bytes))
      bad(param, "media is larger than the limit of " + std::to_string(o.max_bytes) + " bytes");
    bad(param, "invalid base64 in data URL");
  }
  m.data = std::move(*decoded);
  return m;
}

MediaBytes fetch_file(const std::string& url, const MediaFetchOptions& o, const std::string& param) {
  namespace fs = std::filesystem;
  if (o.allowed_local_path.empty()) bad(param, "file:// media is not allowed on this server");
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(o.allowed_local_path, ec);
  const fs::path p = fs::weakly_canonical(fs::path(url.substr(7)), ec);
  if (ec) bad(param, "media file not found");
  const auto rel = p.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") bad(param, "media file is outside the allowed local media path");
  if (!fs::is_regular_file(p, ec)) bad(param, "media file not found");
  if (static_cast<int64_t>(fs::file_size(p, ec)) > o.max_bytes)
    bad(param, "media is larger than the limit of " + std::to_string(o.max_bytes) + " bytes");
  std::ifstream in(p, std::ios::binary);
  MediaBytes m;
  m.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return m;
}

}  // namespace

bool is_internal_address(const std::string& ip) {
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, ip.c_str(), &a4) == 1) return v4_internal(ntohl(a4.s_addr));
  if (inet_pton(AF_INET6, ip.c_str(), &a6) == 1) return v6_internal(a6.s6_addr);
  return true;
}

MediaBytes fetch_media(const std::string& url, const MediaFetchOptions& o, const std::string& param) {
  if (url.rfind("data:", 0) == 0) return fetch_data_url(url, o, param);
  if (url.rfind("file://", 0) == 0) return fetch_file(url, o, param);

  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::string current = url;
  for (int hop = 0;; ++hop) {
    const auto [scheme, host] = scheme_and_host(current, param);
    const bool listed = std::find(o.allowed_domains.begin(), o.allowed_domains.end(), host) != o.allowed_domains.end();
    if (!o.allowed_domains.empty() && !listed) bad(param, "media host '" + host + "' is not in the allowed media domains");

    FetchState st;
    st.allow_internal = listed;
    st.max_bytes = o.max_bytes;
    std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
    VLM_CHECK(c != nullptr, "curl_easy_init failed");
    curl_easy_setopt(c.get(), CURLOPT_URL, current.c_str());
    curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_ms));
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(o.total_timeout_ms));
    curl_easy_setopt(c.get(), CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(o.max_bytes));
    curl_easy_setopt(c.get(), CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c.get(), CURLOPT_OPENSOCKETDATA, &st);
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(c.get(), CURLOPT_USERAGENT, "vlm-server");
    const CURLcode rc = curl_easy_perform(c.get());
    if (st.refused)
      bad(param, "media URL resolves to an internal address (" + st.refused_ip +
                     "); name its host in --allowed-media-domains to allow it");
    if (st.too_big || rc == CURLE_FILESIZE_EXCEEDED)
      bad(param, "media is larger than the limit of " + std::to_string(o.max_bytes) + " bytes");
    if (rc == CURLE_OPERATION_TIMEDOUT) bad(param, "timed out fetching media from '" + host + "'");
    if (rc != CURLE_OK) bad(param, std::string("could not fetch media: ") + curl_easy_strerror(rc));
    long status = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status < 400) {
      char* next = nullptr;
      curl_easy_getinfo(c.get(), CURLINFO_REDIRECT_URL, &next);
      if (!next) bad(param, "media URL redirected without a Location");
      if (hop >= o.max_redirects) bad(param, "media URL redirected more than " + std::to_string(o.max_redirects) + " times");
      current = next;
      continue;
    }
    if (status != 200) bad(param, "media URL answered HTTP " + std::to_string(status));
    MediaBytes m;
    char* ct = nullptr;
    curl_easy_getinfo(c.get(), CURLINFO_CONTENT_TYPE, &ct);
    if (ct) m.mime_type = ct;
    m.data = std::move(st.body);
    return m;
  }
}

}  // namespace vlm
