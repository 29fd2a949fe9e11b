// The committed video clips (tests/fixtures/video) the media tests decode, and a file reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlm::testing {

// tests/fixtures/video
const std::string& video_fixture_dir();
// One clip per container / codec the decoder accepts.
inline constexpr const char* kVideoClips[] = {"h264.mp4", "hevc.mov", "vp8.webm", "vp9.webm",
                                              "h264.mkv", "anim.gif", "rgb.mp4",  "av1.webm"};
// The file's bytes (a gtest failure, and no bytes, when it cannot be opened).
std::vector<uint8_t> read_bytes(const std::string& path);

}  // namespace vlm::testing
