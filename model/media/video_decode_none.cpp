// decode_video in a build without FFmpeg (cmake -DVLM_VIDEO_FILES=OFF): every video file is a
// request error; videos sent as lists of frame images do not come here.
#include "kernels/core/check.h"
#include "model/media/video_decode.h"

namespace vlm {

DecodedVideo decode_video(std::span<const uint8_t> /*bytes*/, const VideoLimits& /*limits*/,
                          const FramePicker& /*pick*/) {
  throw RequestError(400, "invalid_request_error",
                     "this server was built without video-file decoding (VLM_VIDEO_FILES=OFF): send the video as a "
                     "list of frame images",
                     "video");
}

DecodedVideo decode_video(std::span<const uint8_t> bytes, const VideoLimits& limits, const FramePicker& pick,
                          VideoFrameSink& /*sink*/) {
  return decode_video(bytes, limits, pick);
}

}  // namespace vlm
