#!/usr/bin/env bash
# Sanitizer and fuzz suites (docs/RELIABILITY.md). Clang 14 from Debian (scripts/setup.sh).
#
#   scripts/sanitize.sh [--short] [asan] [fuzz] [tsan]     (no suite named: all three; --short
#                                                           alone: asan and fuzz)
#
#   asan  ASan+UBSan build (build-asan/, -O1) of the unit and server tests, run with
#         halt_on_error and leak detection: any report fails the script. Compiler: SAN_CXX
#         (default clang++-14; g++ works too).
#   fuzz  every libFuzzer target in fuzz/ (build-fuzz/, clang, ASan+UBSan, only the parsing
#         code: about 45 files), first replaying fuzz/regressions/<name>/, then fuzzing a copy
#         of fuzz/corpus/<name>/ for FUZZ_SECONDS each (default 60; --short: 20).
#   tsan  ThreadSanitizer build (build-tsan/) of the engine and server tests; runs their
#         concurrency tests (TSAN_*_FILTER).
#
# CI (scripts/test.sh when CI=true) runs `--short`: asan on test_model, test_engine and
# test_server, and the fuzz suite at 20 s a fuzzer. tsan (a third full build) only in the long
# form; docs/RELIABILITY.md has the figures.
# Exit status: 0 when every suite ran clean.
set -euo pipefail
cd "$(dirname "$0")/.."

short=0
suites=()
for a in "$@"; do
  case "$a" in
    --short) short=1 ;;
    asan|fuzz|tsan) suites+=("$a") ;;
    *) echo "usage: $0 [--short] [asan] [fuzz] [tsan]" >&2; exit 2 ;;
  esac
done
if [ ${#suites[@]} -eq 0 ]; then
  if [ $short -eq 1 ]; then suites=(asan fuzz); else suites=(asan fuzz tsan); fi
fi
has() { local s; for s in "${suites[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

JOBS=${JOBS:-$(nproc)}
ASAN_DIR=${ASAN_BUILD_DIR:-build-asan}
FUZZ_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
TSAN_DIR=${TSAN_BUILD_DIR:-build-tsan}
SAN_CXX=${SAN_CXX:-clang++-14}
case "$SAN_CXX" in *clang++*) SAN_CC=${SAN_CC:-${SAN_CXX/clang++/clang}} ;; *) SAN_CC=${SAN_CC:-gcc} ;; esac
# One BLAS thread: OpenBLAS is not instrumented, and its own threads only add noise.
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/fuzz/tsan.supp

configure() {  # dir sanitizers fuzzers c-compiler c++-compiler
  local debug="-g1"
  case "$5" in *clang*) debug="-gline-tables-only" ;; esac
  CC="$4" CXX="$5" cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 $debug" -DVLM_SANITIZE="$2" \
    -DVLM_BUILD_FUZZERS="$3" -DVLM_BUILD_TESTS=$([ "$3" = ON ] && echo OFF || echo ON) \
    -DVLM_BUILD_BENCH=OFF >/dev/null
}
fuzzers() { ls fuzz/fuzz_*.cpp | sed 's#fuzz/\(.*\)\.cpp#\1#'; }

if has asan; then
  configure "$ASAN_DIR" address,undefined OFF "$SAN_CC" "$SAN_CXX"
  if [ $short -eq 1 ]; then tests=(test_model test_engine test_server); else tests=(test_kernels test_model test_engine test_server test_tools); fi
  echo "sanitize: asan+ubsan build of ${tests[*]}"
  cmake --build "$ASAN_DIR" -j "$JOBS" --target "${tests[@]}" vlm-server vlm-random-model
  [ $short -eq 1 ] || cmake --build "$ASAN_DIR" -j "$JOBS"
  for t in "${tests[@]}"; do
    echo "sanitize: asan+ubsan $t"
    "$ASAN_DIR/bin/$t" --gtest_brief=1
  done
fi

if has fuzz; then
  secs=${FUZZ_SECONDS:-$([ $short -eq 1 ] && echo 20 || echo 60)}
  mapfile -t names < <(fuzzers)
  configure "$FUZZ_DIR" address,undefined ON clang-14 clang++-14
  cmake --build "$FUZZ_DIR" -j "$JOBS" --target "${names[@]}"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  for f in "${names[@]}"; do
    n=${f#fuzz_}
    mkdir -p "$work/$n"
    cp -r fuzz/corpus/"$n"/. "$work/$n"/ 2>/dev/null || true
    dict=()
    [ -f fuzz/dict/"$n".dict ] && dict=(-dict=fuzz/dict/"$n".dict)
    echo "sanitize: fuzz $n for ${secs}s"
    # Regression inputs first (each must run clean), then fresh fuzzing from the corpus.
    if [ -d fuzz/regressions/"$n" ] && [ -n "$(ls -A fuzz/regressions/"$n")" ]; then
      "$FUZZ_DIR/bin/$f" fuzz/regressions/"$n"/* >/dev/null 2>&1 || { "$FUZZ_DIR/bin/$f" fuzz/regressions/"$n"/*; exit 1; }
    fi
    "$FUZZ_DIR/bin/$f" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/$n-" "$work/$n" 2>&1 \
      | grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE|==[0-9]+==ERROR|SUMMARY|fuzz:)' || true
    if ls "$work/$n"-* >/dev/null 2>&1; then
      echo "sanitize: fuzz $n FOUND a failing input:"; ls "$work/$n"-*
      mkdir -p "${FUZZ_ARTIFACTS:-fuzz-artifacts}"; cp "$work/$n"-* "${FUZZ_ARTIFACTS:-fuzz-artifacts}/"
      exit 1
    fi
  done
fi

if has tsan; then
  echo "sanitize: tsan build of test_engine test_server"
  configure "$TSAN_DIR" thread OFF "$SAN_CC" "$SAN_CXX"
  cmake --build "$TSAN_DIR" -j "$JOBS" --target test_engine test_server vlm-server vlm-random-model
  "$TSAN_DIR/bin/test_engine" --gtest_brief=1 --gtest_filter="${TSAN_ENGINE_FILTER:-*Loop*:*Concurren*:*Channel*:*Requests*:*Queue*}"
  "$TSAN_DIR/bin/test_server" --gtest_brief=1 --gtest_filter="${TSAN_SERVER_FILTER:-HttpServerTest.*:Metrics.*:ApiServerTest.SixtyFour*:ApiServerTest.Disconnect*}"
fi
echo "sanitize: clean (${suites[*]})"
