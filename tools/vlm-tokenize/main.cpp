// vlm-tokenize: the model's tokenizer from the command line, for scripting and debugging.
//   vlm-tokenize --model DIR [--no-special]           text on stdin -> JSON array of ids
//   vlm-tokenize --model DIR --decode [--skip-special] JSON array of ids on stdin -> text
//   vlm-tokenize --model DIR --chat FILE.json [--no-generation-prompt] [--print-prompt]
//       FILE holds a messages list (or {"messages": [...], other template variables}); the model's
//       chat template renders it and the rendering is encoded as the server does (BOS added
//       unless the template wrote it; Tokenizer::encode_chat).
// Encoding reads stdin byte for byte (`echo` adds a newline; `printf %s` does not) and prints
// the ids on one line; --no-special leaves out the post-processor's special tokens (BOS/EOS).
// Decoding prints the text exactly, without a trailing newline; --skip-special leaves special
// tokens out. Exit codes: 0 ok, 1 load error, 2 usage or input error, 3 internal error.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/common/cli_flags.h"

namespace {

struct Options {
  std::string model;
  bool decode = false;
  bool no_special = false;    // encode: add_special_tokens = false
  bool skip_special = false;  // decode: skip_special_tokens = true
  std::string chat_file;         // --chat FILE.json: render these messages with the chat template
  bool generation_prompt = true;  // --no-generation-prompt: add_generation_prompt = false
  bool print_prompt = false;      // --print-prompt: print the rendered text instead of ids
};

const char* const kUsage =
    "usage: vlm-tokenize --model DIR [--no-special]   (text on stdin)\n"
    "       vlm-tokenize --model DIR --decode [--skip-special]   (JSON ids on stdin)\n";

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr, "error: %s\n%s", error.c_str(), kUsage);
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
    else if (a == "--chat") {
      if (i + 1 >= argc) usage("--chat needs a file");
      o.chat_file = argv[++i];
    } else if (a == "--no-generation-prompt") o.generation_prompt = false;
    else if (a == "--print-prompt") o.print_prompt = true;
    else usage("unknown argument '" + a + "'");
  }
  if (o.model.empty()) usage("--model is required");
  if (o.decode && o.no_special) usage("--no-special is for encoding; decoding takes --skip-special");
  if (!o.decode && o.skip_special) usage("--skip-special is for --decode");
  if (o.chat_file.empty() && (!o.generation_prompt || o.print_prompt)) usage("--no-generation-prompt and --print-prompt go with --chat");
  if (!o.chat_file.empty() && (o.decode || o.no_special)) usage("--chat encodes a rendered conversation; no --decode or --no-special");
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

int render_chat(const Options& o, const vlm::Tokenizer& tok) {
  std::optional<vlm::ChatTemplate> tmpl = vlm::ChatTemplate::load(o.model);
  if (!tmpl) {
    std::fprintf(stderr, "error: %s has no chat template\n", o.model.c_str());
    return 1;
  }
  std::ifstream in(o.chat_file);
  if (!in) usage("cannot open " + o.chat_file);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, false);
  if (j.is_discarded()) usage(o.chat_file + ": not valid JSON");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  nlohmann::ordered_json messages = j;
  if (j.is_object()) {
    messages = j.value("messages", nlohmann::ordered_json());
    context = j;
    context.erase("messages");
  }
  if (!messages.is_array()) usage(o.chat_file + ": expected a messages list or {\"messages\": [...]}");
  vlm::ChatTemplate::add_tokenizer_defaults(context, tok, o.generation_prompt);
  const std::string prompt = tmpl->render(messages, context);
  if (o.print_prompt) std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  else std::printf("%s\n", nlohmann::json(tok.encode_chat(prompt)).dump().c_str());
  std::fflush(stdout);
  return 0;
}

int run(const Options& o) {
  auto tok = vlm::Tokenizer::load(o.model);
  if (!o.chat_file.empty()) return render_chat(o, *tok);
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
  if (vlm::cli::help_requested(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const Options o = parse(argc, argv);
  return vlm::cli::run_tool([&] { return run(o); });
}
