#include "tools/vlm-bench/simple_http_client.h"

#include <curl/curl.h>

#include <stdexcept>

namespace vlm::bench {
namespace {

size_t append_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

}  // namespace

SimpleHttpClient::SimpleHttpClient(std::string api_key, double timeout_s)
    : easy_(curl_easy_init()), api_key_(std::move(api_key)), timeout_s_(timeout_s) {
  if (!easy_) throw std::runtime_error("curl_easy_init failed");
}

SimpleHttpClient::~SimpleHttpClient() { curl_easy_cleanup(easy_); }

HttpResult SimpleHttpClient::get(const std::string& url) { return perform(url, nullptr); }

HttpResult SimpleHttpClient::post_json(const std::string& url, const std::string& body) {
  return perform(url, &body);
}

HttpResult SimpleHttpClient::perform(const std::string& url, const std::string* body) {
  HttpResult r;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Expect:");
  if (!api_key_.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + api_key_).c_str());
  curl_easy_setopt(easy_, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy_, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s_ * 1000));
  curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(easy_, CURLOPT_WRITEDATA, &r.body);
  if (body) {
    curl_easy_setopt(easy_, CURLOPT_POST, 1L);
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  } else {
    curl_easy_setopt(easy_, CURLOPT_HTTPGET, 1L);
  }
  const CURLcode rc = curl_easy_perform(easy_);
  curl_slist_free_all(headers);
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, nullptr);
  if (rc != CURLE_OK) {
    r.error = curl_easy_strerror(rc);
    return r;
  }
  long status = 0;
  curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status);
  r.status = static_cast<int>(status);
  return r;
}

}  // namespace vlm::bench
