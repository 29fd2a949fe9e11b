#!/usr/bin/env bash
# Installs every build and test dependency of vlm-server from Debian packages.
# Idempotent and non-interactive: packages already present are not touched.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libboost-dev libboost-system-dev          # Beast / Asio (header-only, plus system)
  nlohmann-json3-dev libspdlog-dev libfmt-dev
  libopenblas-dev libcurl4-openssl-dev
  zlib1g-dev                               # vlm-bench: PNG images
  libpcre2-dev libutf8proc-dev             # tokenizer: Unicode regexes, NFC
  libjpeg62-turbo-dev libpng-dev           # image decoding (JPEG, PNG)
  libwebp-dev libgif-dev                   # image decoding (WebP, GIF first frame)
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # video files (MP4/WebM/MKV/GIF)
  ffmpeg                                   # tests: makes the bad-file table's clips
  openssl curl                             # test data integrity; curl for health checks and examples
  prometheus                               # promtool checks the /metrics exposition in tests
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev llvm-14     # scripts/sanitize.sh: ASan/UBSan/TSan, libFuzzer, symbolizer
  python3
  nginx python3-yaml                       # replica test (tests/scaleout): load balancer, manifest check
  chromium                                 # web playground test (tests/webui): headless browser
)
# The test data comes from the npm registry: use the machine's npm, or Debian's.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
