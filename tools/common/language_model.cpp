#include "tools/common/language_model.h"

#include "model/families/architecture.h"

namespace vlm::cli {

LanguageModel load_language_model(const std::string& model_dir) {
  LanguageModel m;
  m.model = load_model(model_dir);
  return m;
}

}  // namespace vlm::cli
