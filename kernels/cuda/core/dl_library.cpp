#include "kernels/cuda/core/dl_library.h"

#include <glob.h>

#include <cstdio>

namespace vlm::cuda {

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

std::vector<std::string> nvidia_package_dirs() {
  std::vector<std::string> dirs;
  for (const char* pat : {"/usr/local/lib/python3*/dist-packages/nvidia", "/usr/local/lib/python3*/site-packages/nvidia",
                          "/usr/lib/python3/dist-packages/nvidia", "/usr/lib/python3*/site-packages/nvidia",
                          "/opt/conda/lib/python3*/site-packages/nvidia", "/root/.local/lib/python3*/site-packages/nvidia",
                          "/opt/venv/lib/python3*/site-packages/nvidia", "/opt/*/.venv/lib/python3*/site-packages/nvidia",
                          "/usr/local/python*/lib/python3*/site-packages/nvidia"})
    for (const std::string& d : glob_paths(pat)) dirs.push_back(d);
  if (FILE* p = popen("python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])' 2>/dev/null", "r")) {
    char buf[512];
    if (std::fgets(buf, sizeof buf, p) != nullptr) {
      std::string s(buf);
      while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
      if (!s.empty()) dirs.push_back(s + "/nvidia");
    }
    pclose(p);
  }
  return dirs;
}

}  // namespace vlm::cuda
