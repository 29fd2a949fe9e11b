// Fetches the bytes of a media item named by a request: `data:` URLs (base64), http(s) URLs
// through libcurl, and `file://` paths under an explicitly allowed directory.
//
// Safety (shared/SERVING.md, users' complaints about media fetches that hang or reach internal
// hosts): connect and total timeouts; a byte limit enforced while reading; redirects followed by
// hand, each hop re-checked, at most max_redirects; only http and https; every address curl is
// about to connect to is checked (no DNS-rebinding gap): loopback, private, link-local, CGNAT,
// multicast and reserved addresses are refused unless the URL's host is listed in
// allowed_domains. A non-empty allowed_domains also restricts fetches to the listed hosts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlm {

struct MediaFetchOptions {
  int64_t max_bytes = 20 << 20;
  int connect_timeout_ms = 5000;
  int total_timeout_ms = 20000;
  int max_redirects = 3;
  std::vector<std::string> allowed_domains;  // exact host names or IP literals
  std::string allowed_local_path;            // "" = file:// refused
};

struct MediaBytes {
  std::string data;
  std::string mime_type;  // from the data: URL or Content-Type; may be empty
};

// Throws RequestError(400, "invalid_request_error", ..., param) naming what was wrong: bad or
// unsupported URL, refused address, timeout, HTTP status, too many bytes, bad base64.
MediaBytes fetch_media(const std::string& url, const MediaFetchOptions& options,
                       const std::string& param = "image_url");

// True for addresses that must not be reached on a user's behalf. `ip` is a numeric IPv4 or
// IPv6 address; a string that does not parse counts as disallowed.
bool is_internal_address(const std::string& ip);

}  // namespace vlm
