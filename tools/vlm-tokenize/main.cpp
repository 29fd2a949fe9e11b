// vlm-tokenize: the model's tokenizer from the command line, for scripting and debugging.
//   vlm-tokenize --model DIR [--no-special]           text on stdin -> JSON array of ids
//   vlm-tokenize --model DIR --decode [--skip-special] JSON array of ids on stdin -> text
// Encoding reads stdin byte for byte (`echo` adds a newline; `printf %s` does not) and prints
// the ids on one line; --no-special leaves out the post-processor's special tokens (BOS/EOS).
// Decoding prints the text exactly, without a trailing newline; --skip-special leaves special
// tokens out. Exit codes: 0 ok, 1 load error, 2 usage or input error, 3 internal error.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/check.h"
#include "model/tokenizer.h"

namespace {

struct Options {
  std::string model;
  bool decode = false;
  bool no_special = false;    // encode: add_special_tokens = false
  bool skip_special = false;  // decode: skip_special_tokens = true
  // Place for --chat FILE.json: render a messages list with the model's chat template
  // (model/chat_template), then encode the rendered prompt. Added with the chat template.
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr,
               "error: %s\nusage: vlm-tokenize --model DIR [--no-special]   (text on stdin)\n"
               "       vlm-tokenize --model DIR --decode [--skip-special]   (JSON ids on stdin)\n",
               error.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model") {
      if (i + 1 >= argc) usage("--model needs a value");
      o.model = argv[++i];
    } else if (a == "--decode") o.decode = true;
    else if (a == "--no-special") o.no_special = true;
    else if (a == "--skip-special") o.skip_special = true;
    else if (a == "--help" || a == "-h") usage("help requested");
    else usage("unknown argument '" + a + "'");
  }
  if (o.model.empty()) usage("--model is required");
  if (o.decode && o.no_special) usage("--no-special is for encoding; decoding takes --skip-special");
  if (!o.decode && o.skip_special) usage("--skip-special is for --decode");
  return o;
}

std::string read_stdin() {
  std::cin >> std::noskipws;
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab_size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error&) {
    usage("stdin: expected a JSON array of token ids");
  }
  if (!j.is_array()) usage("stdin: expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer()) usage("stdin: token id " + v.dump() + " is not an integer");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= vocab_size)
      usage("stdin: token id " + std::to_string(id) + " outside the vocabulary (size " +
            std::to_string(vocab_size) + ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

int run(const Options& o) {
  auto tok = vlm::Tokenizer::load(o.model);
  const std::string input = read_stdin();
  if (o.decode) {
    const std::string text = tok->decode(parse_ids(input, tok->vocab_size()), o.skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    const std::vector<int32_t> ids = tok->encode(input, !o.no_special);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const vlm::LoadError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 3;
  }
}
