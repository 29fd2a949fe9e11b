#include "model/decoder/modality.h"

namespace vlm {

const char* modality_name(Modality m) {
  switch (m) {
    case Modality::Text: return "text";
    case Modality::Image: return "image";
    case Modality::Video: return "video";
  }
  return "?";
}

}  // namespace vlm
