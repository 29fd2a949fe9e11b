// ImageLoader: an image part of a request (its URL) -> pixel_values for the model. Fetches the
// bytes (server/media_fetch: data: URLs, http(s) with its address checks and limits, allowed
// local files), decodes them (model/image_decode, with byte and pixel limits) and preprocesses
// them as the checkpoint's preprocessor_config.json says (model/image_preprocess).
#pragma once

#include <string>

#include "engine/media_inputs.h"
#include "engine/scheduling/block_hash.h"
#include "model/media/image_decode.h"
#include "model/media/image_preprocess.h"
#include "server/media/media_fetch.h"

namespace vlm {

// Fetches `url` and decodes it within `limits`. Throws RequestError (400, param `param`) for a
// URL that cannot be fetched, bytes that are not a supported image, or an image over the byte or
// pixel limits. Shared by the LLaVA and the Qwen2-VL loaders.
RgbImage fetch_image(const std::string& url, const MediaFetchOptions& fetch, const ImageLimits& limits,
                     const std::string& param);
// Decodes fetched bytes within `limits`; errors as fetch_image's.
RgbImage decode_fetched_image(const MediaBytes& bytes, const ImageLimits& limits, const std::string& param);

// Adds to `h` what of the settings changes a loader's output or what it accepts (the processed
// media cache's preprocess keys, server/media/processed_media_cache.h).
void add_to_key(Hasher128& h, const ImagePreprocessConfig& c);
void add_to_key(Hasher128& h, const ImageLimits& limits);
void add_double(Hasher128& h, double v);
// A fetched part's bytes (their length, then the bytes) into a source key.
void add_bytes(Hasher128& h, const MediaBytes& b);
// m's source key (MediaPixels::source_key, the prefix cache's identity of a media item) = h's digest.
void set_source_key(MediaPixels& m, const Hasher128& h);

class ImageLoader {
 public:
  ImageLoader(MediaFetchOptions fetch, ImageLimits limits, ImagePreprocessConfig preprocess);

  // Throws RequestError (400, param `param`) for a URL that cannot be fetched, bytes that are
  // not a supported image, or an image over the byte or pixel limits; the message says which.
  ImagePixels load(const std::string& url, const std::string& param) const;
  // load() in two parts (the processed media cache keys on the bytes in between), and the key of
  // this loader's preprocessing.
  MediaBytes fetch_image_bytes(const std::string& url, const std::string& param) const;
  ImagePixels image_from_bytes(const MediaBytes& bytes, const std::string& param) const;
  BlockHash image_preprocess_key() const { return preprocess_key_; }

 private:
  MediaFetchOptions fetch_;
  ImageLimits limits_;
  ImagePreprocessor preprocessor_;
  BlockHash preprocess_key_;
};

}  // namespace vlm
