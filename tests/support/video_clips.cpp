#include "tests/support/video_clips.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace vlm::testing {

const std::string& video_fixture_dir() {
  static const std::string dir = std::string(VLM_FIXTURES_DIR) + "/video";
  return dir;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace vlm::testing
