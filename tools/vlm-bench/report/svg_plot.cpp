#include "tools/vlm-bench/report/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace vlm::bench {
namespace {

constexpr double kPanelW = 360, kPanelH = 260, kMarginL = 60, kMarginB = 45, kMarginT = 30, kMarginR = 15;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// A "nice" axis maximum and tick step (1, 2 or 5 times a power of ten).
std::pair<double, double> nice_axis(double max_value) {
  if (!(max_value > 0)) return {1.0, 0.2};
  const double raw = max_value / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) { step = m * mag; break; }
  return {std::ceil(max_value / step) * step, step};
}

struct Panel {
  double x0, y0;  // top-left of the plot area
  double w = kPanelW - kMarginL - kMarginR, h = kPanelH - kMarginT - kMarginB;
  double xmax, ymax;
  double px(double x) const { return x0 + w * x / xmax; }
  double py(double y) const { return y0 + h - h * y / ymax; }
};

// Frame, ticks, grid and labels for a panel with axes [0, xmax] x [0, ymax].
std::string axes(const Panel& p, double xstep, double ystep, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel) {
  std::string s;
  s += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="white" stroke="#444"/>)" "\n",
                   p.x0, p.y0, p.w, p.h);
  for (double x = 0; x <= p.xmax + 1e-9; x += xstep) {
    s += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#ddd"/>)" "\n", p.px(x), p.y0, p.y0 + p.h);
    s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="middle">{:g}</text>)" "\n", p.px(x), p.y0 + p.h + 14, x);
  }
  for (double y = 0; y <= p.ymax + 1e-9; y += ystep) {
    s += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{2:.1f}" y2="{1:.1f}" stroke="#ddd"/>)" "\n", p.x0, p.py(y), p.x0 + p.w);
    s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="10" text-anchor="end">{:g}</text>)" "\n", p.x0 - 5, p.py(y) + 3, y);
  }
  s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="13" font-weight="bold" text-anchor="middle">{}</text>)" "\n",
                   p.x0 + p.w / 2, p.y0 - 10, escape(title));
  s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle">{}</text>)" "\n",
                   p.x0 + p.w / 2, p.y0 + p.h + 32, escape(xlabel));
  s += fmt::format(R"svg(<text x="{0:.1f}" y="{1:.1f}" font-size="11" text-anchor="middle" transform="rotate(-90 {0:.1f} {1:.1f})">{2}</text>)svg" "\n",
                   p.x0 - 42, p.y0 + p.h / 2, escape(ylabel));
  return s;
}

std::string polyline(const std::vector<std::pair<double, double>>& pts, const Panel& p, const char* colour) {
  std::string s = R"(<polyline fill="none" stroke-width="1.8" stroke=")" + std::string(colour) + R"(" points=")";
  for (const auto& [x, y] : pts) s += fmt::format("{:.1f},{:.1f} ", p.px(x), p.py(y));
  return s + "\"/>\n";
}

std::string no_data(const Panel& p) {
  return fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="12" text-anchor="middle" fill="#888">no data</text>)" "\n",
                     p.x0 + p.w / 2, p.y0 + p.h / 2);
}

// An empirical CDF as a step line (at most ~400 points).
std::string cdf_panel(std::vector<double> values, double x0, const std::string& title, const std::string& xlabel,
                      const char* colour) {
  std::sort(values.begin(), values.end());
  const auto [xmax, xstep] = nice_axis(values.empty() ? 1.0 : values.back());
  Panel p{x0 + kMarginL, kMarginT + 40, kPanelW - kMarginL - kMarginR, kPanelH - kMarginT - kMarginB, xmax, 1.0};
  std::string s = axes(p, xstep, 0.2, title, xlabel, "fraction of samples");
  if (values.empty()) return s + no_data(p);
  std::vector<std::pair<double, double>> pts{{values.front(), 0.0}};
  const size_t n = values.size(), stride = std::max<size_t>(1, n / 400);
  for (size_t i = 0; i < n; i += stride) {
    const size_t last = std::min(n, i + stride) - 1;
    pts.emplace_back(values[last], static_cast<double>(i) / n);
    pts.emplace_back(values[last], static_cast<double>(last + 1) / n);
  }
  return s + polyline(pts, p, colour);
}

}  // namespace

std::string render_svg_report(const std::vector<RequestSample>& samples, const std::string& title) {
  std::vector<double> ttft, itl;
  double end = 0;
  for (const RequestSample& r : samples) {
    end = std::max(end, r.end_s);
    if (!r.success) continue;
    ttft.push_back(r.ttft_s * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
  }
  // Throughput buckets: one second, or finer for short runs (about 40 buckets at least).
  double bucket = 1.0;
  while (bucket > 0.01 && end / bucket < 40) bucket /= 2;
  const std::vector<double> tps = output_tokens_per_second(samples, bucket);

  const double width = 3 * kPanelW, height = kPanelH + 40;
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0:.0f}" height="{1:.0f}" viewBox="0 0 {0:.0f} {1:.0f}" font-family="sans-serif">)" "\n",
      width, height);
  s += fmt::format(R"(<rect width="100%" height="100%" fill="#fafafa"/>)" "\n");
  s += fmt::format(R"(<text x="10" y="22" font-size="15" font-weight="bold">{}</text>)" "\n", escape(title));
  s += cdf_panel(ttft, 0, "TTFT CDF", "TTFT (ms)", "#1f77b4");
  s += cdf_panel(itl, kPanelW, "ITL CDF", "inter-token latency (ms)", "#d62728");
  {
    double ymaxv = 0;
    for (double v : tps) ymaxv = std::max(ymaxv, v);
    const auto [xmax, xstep] = nice_axis(std::max(end, bucket));
    const auto [ymax, ystep] = nice_axis(ymaxv);
    Panel p{2 * kPanelW + kMarginL, kMarginT + 40, kPanelW - kMarginL - kMarginR, kPanelH - kMarginT - kMarginB, xmax, ymax};
    s += axes(p, xstep, ystep, fmt::format("Output tokens/s ({:g} s buckets)", bucket), "time since start (s)", "tokens/s");
    if (tps.empty()) {
      s += no_data(p);
    } else {
      std::vector<std::pair<double, double>> pts;
      for (size_t k = 0; k < tps.size(); ++k) {
        pts.emplace_back(k * bucket, tps[k]);
        pts.emplace_back((k + 1) * bucket, tps[k]);
      }
      s += polyline(pts, p, "#2ca02c");
    }
  }
  return s + "</svg>\n";
}

void write_svg_report(const std::string& path, const std::vector<RequestSample>& samples, const std::string& title) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("--plot " + path + ": cannot open for writing");
  f << render_svg_report(samples, title);
  if (!f) throw std::runtime_error("--plot " + path + ": write failed");
}

}  // namespace vlm::bench
