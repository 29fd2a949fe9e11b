// Fuzzes data-URL and base64 decoding as a request's image_url goes through them:
// server/base64 (decode with a byte limit, and encode/decode round trip) and
// server/media_fetch's data: path (the MIME part, ;base64, and the byte limit).
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "server/http/base64.h"
#include "server/media/media_fetch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  // Plain decode, limited and not: a limited decode is the unlimited one or nothing.
  auto full = vlm::base64_decode(in);
  auto limited = vlm::base64_decode(in, 64);
  if (limited && (!full || *limited != *full || limited->size() > 64)) std::abort();
  if (full) {
    // Round trip: what decodes re-encodes to something that decodes to the same bytes.
    auto again = vlm::base64_decode(vlm::base64_encode(*full));
    if (!again || *again != *full) std::abort();
  }
  // As a data: URL (and the input itself as a URL: any scheme must be a clean 400, never a
  // network fetch: no domains are allowed and file:// has no root).
  vlm::MediaFetchOptions opt;
  opt.max_bytes = 1 << 16;
  opt.allowed_domains = {"fuzz.invalid"};
  vlm::fuzz::run_expecting_clean_errors([&] { vlm::fetch_media("data:" + in, opt); });
  if (in.rfind("http", 0) != 0)  // no real fetches from a fuzzer
    vlm::fuzz::run_expecting_clean_errors([&] { vlm::fetch_media(in, opt); });
  return 0;
}
