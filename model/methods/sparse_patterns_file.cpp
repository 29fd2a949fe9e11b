#include "model/methods/sparse_patterns_file.h"

#include "model/decoder/json_file.h"

namespace vlm {
namespace {

using nlohmann::json;

HeadPattern parse_pattern_array(const json& a, const std::string& where) {
  if (!a.is_array() || a.empty() || !a[0].is_string()) throw LoadError(where + ": pattern must be [type, ...]");
  const auto type = parse_head_pattern_type(a[0].get<std::string>());
  if (!type) throw LoadError(where + ": unknown pattern type '" + a[0].get<std::string>() + "'");
  HeadPattern p;
  p.type = *type;
  auto num = [&](size_t i, double dflt) { return a.size() > i ? a[i].get<double>() : dflt; };
  switch (p.type) {
    case HeadPatternType::Dense: break;
    case HeadPatternType::AShape:
      p.n_init = static_cast<int>(num(1, p.n_init));
      p.n_local = static_cast<int>(num(2, p.n_local));
      break;
    case HeadPatternType::VerticalSlash:
      p.vertical_size = static_cast<int>(num(1, p.vertical_size));
      p.slash_size = static_cast<int>(num(2, p.slash_size));
      break;
    case HeadPatternType::Grid:
      p.grid.band = static_cast<int>(num(1, p.grid.band));
      p.grid.max_stride = static_cast<int>(num(2, p.grid.max_stride));
      break;
    case HeadPatternType::XAttention:
      p.xattention.stride = static_cast<int>(num(1, p.xattention.stride));
      p.xattention.threshold = static_cast<float>(num(2, p.xattention.threshold));
      if (p.xattention.stride <= 0) throw LoadError(where + ": xattention stride must be > 0");
      break;
  }
  return p;
}

HeadPattern parse_head(const json& h, const std::string& where) {
  if (h.is_array()) return parse_pattern_array(h, where);  // MInference entry
  if (!h.is_object()) throw LoadError(where + ": a head must be an object or an array");
  HeadPattern p;
  if (h.contains("pattern")) {
    p = parse_pattern_array(h.at("pattern"), where);
  } else if (h.contains("patterns") && h.at("patterns").is_object() && !h.at("patterns").empty()) {
    const json& ps = h.at("patterns");
    p = parse_pattern_array(ps.contains("vision") ? ps.at("vision") : ps.begin().value(), where);
  } else {
    throw LoadError(where + ": head has no \"pattern\"");
  }
  const std::string b = h.value("boundary", std::string("none"));
  if (b == "none" || b == "k") p.boundary = BoundaryKind::None;
  else if (b == "q") p.boundary = BoundaryKind::Q;
  else if (b == "2d") p.boundary = BoundaryKind::TwoD;
  else throw LoadError(where + ": unknown boundary '" + b + "'");
  if (p.boundary != BoundaryKind::None && p.type != HeadPatternType::VerticalSlash) {
    p.vertical_size = 1000;
    p.slash_size = 6096;
  }
  if (h.contains("boundary_sizes")) {
    const json& s = h.at("boundary_sizes");
    if (!s.is_array() || s.size() != 2) throw LoadError(where + ": boundary_sizes must be [v, s]");
    p.vertical_size = s[0].get<int>();
    p.slash_size = s[1].get<int>();
  }
  if (h.contains("stride")) {
    const json& s = h.at("stride");
    if (s.is_string() && s.get<std::string>() == "auto") p.grid.stride = 0;
    else if (s.is_number_integer() && s.get<int>() > 0) p.grid.stride = s.get<int>();
    else throw LoadError(where + ": stride must be \"auto\" or a positive integer");
  }
  if (h.contains("lines")) {
    const std::string l = h.at("lines").get<std::string>();
    p.grid.use_hline = l.find('h') != std::string::npos;
    p.grid.use_vline = l.find('v') != std::string::npos;
    p.grid.use_slash = l.find('s') != std::string::npos;
  }
  return p;
}

json pattern_array(const HeadPattern& p) {
  switch (p.type) {
    case HeadPatternType::Dense: return json::array({"dense"});
    case HeadPatternType::AShape: return json::array({"a_shape", p.n_init, p.n_local});
    case HeadPatternType::VerticalSlash: return json::array({"vertical_and_slash", p.vertical_size, p.slash_size});
    case HeadPatternType::Grid: return json::array({"grid", p.grid.band, p.grid.max_stride});
    case HeadPatternType::XAttention: return json::array({"xattention", p.xattention.stride, p.xattention.threshold});
  }
  return json::array({"dense"});
}

}  // namespace

SparseHeadPatterns load_sparse_patterns(const std::string& path) {
  return parse_json_file(path, [](const json& j, const std::string& file) {
    const json* layers = &j;
    if (j.is_object()) {
      if (j.value("version", 1) != 1) throw LoadError(file + ": unsupported version");
      if (!j.contains("layers")) throw LoadError(file + ": no \"layers\"");
      layers = &j.at("layers");
    }
    if (!layers->is_array()) throw LoadError(file + ": layers must be a list");
    SparseHeadPatterns out;
    for (size_t l = 0; l < layers->size(); ++l) {
      const json& layer = (*layers)[l];
      if (!layer.is_object()) throw LoadError(file + ": layer " + std::to_string(l) + " must be an object");
      std::vector<HeadPattern> heads;
      std::vector<bool> seen;
      for (const auto& [key, h] : layer.items()) {
        const std::string where = file + ": layer " + std::to_string(l) + " head " + key;
        int idx = -1;
        try {
          idx = std::stoi(key);
        } catch (...) {
        }
        if (idx < 0 || idx > 4096) throw LoadError(where + ": head keys are query-head indices");
        if (static_cast<int>(heads.size()) <= idx) {
          heads.resize(idx + 1);
          seen.resize(idx + 1, false);
        }
        heads[idx] = parse_head(h, where);
        seen[idx] = true;
      }
      for (size_t h = 0; h < seen.size(); ++h)
        if (!seen[h]) throw LoadError(file + ": layer " + std::to_string(l) + " lacks head " + std::to_string(h));
      out.layers.push_back(std::move(heads));
    }
    return out;
  });
}

std::string sparse_patterns_to_json(const SparseHeadPatterns& pats, const std::string& model,
                                    const std::vector<std::vector<double>>& scores) {
  json layers = json::array();
  for (size_t l = 0; l < pats.layers.size(); ++l) {
    json layer = json::object();
    for (size_t h = 0; h < pats.layers[l].size(); ++h) {
      const HeadPattern& p = pats.layers[l][h];
      json e;
      e["boundary"] = p.boundary == BoundaryKind::Q ? "q" : p.boundary == BoundaryKind::TwoD ? "2d" : "none";
      e["pattern"] = pattern_array(p);
      if (p.type == HeadPatternType::Grid) {
        e["stride"] = p.grid.stride > 0 ? json(p.grid.stride) : json("auto");
        e["lines"] = std::string(p.grid.use_hline ? "h" : "") + (p.grid.use_vline ? "v" : "") +
                     (p.grid.use_slash ? "s" : "");
      }
      if (p.boundary != BoundaryKind::None) e["boundary_sizes"] = json::array({p.vertical_size, p.slash_size});
      if (l < scores.size() && h < scores[l].size()) e["score"] = scores[l][h];
      layer[std::to_string(h)] = e;
    }
    layers.push_back(layer);
  }
  json j;
  j["version"] = 1;
  j["model"] = model;
  j["layers"] = layers;
  return j.dump(1);
}

}  // namespace vlm
