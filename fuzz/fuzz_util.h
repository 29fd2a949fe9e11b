// Shared by the libFuzzer targets (fuzz/fuzz_*.cpp): what counts as a clean rejection.
// A target calls the code under test inside run_expecting_clean_errors(): RequestError (a 4xx
// for bad user input) and LoadError (a bad file) are the contract and pass; anything else that
// escapes (InternalError, std::out_of_range, nlohmann exceptions, ...) aborts and is a finding,
// as are the sanitizers' reports (memory errors, UB, leaks) and timeouts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "kernels/core/check.h"

namespace vlm::fuzz {

template <typename F>
void run_expecting_clean_errors(F&& f) {
  try {
    f();
  } catch (const RequestError&) {
  } catch (const LoadError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: unexpected exception escaped: %s\n", e.what());
    std::abort();
  }
}

// Source tree root (for the real tokenizer and templates under tests/).
inline std::string source_dir() { return VLM_SOURCE_DIR; }

}  // namespace vlm::fuzz
