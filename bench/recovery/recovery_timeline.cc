#include "bench/recovery/recovery_timeline.h"

#include <algorithm>
#include <regex>

namespace rtft::bench {

double FirstTime(const std::string& out, const std::string& pattern, std::string* group) {
  const std::regex re(pattern + R"(.* t=([0-9.]+))");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return -1;
  if (group != nullptr && m.size() > 2) *group = m[1];
  return std::stod(m[m.size() - 1]);
}

Stages ParseStages(const std::string& output) {
  static const std::regex recovered(
      R"(\[train \d+\] recovered .* bytes=(\d+) event_s=[0-9.]+ agree_s=([0-9.]+) )"
      R"(rebuild_s=([0-9.]+) transfer_s=([0-9.]+))");
  Stages st;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), recovered);
       it != std::sregex_iterator(); ++it) {
    st.bytes_moved += std::stod((*it)[1]);
    st.agree_s = std::max(st.agree_s, std::stod((*it)[2]));
    st.rebuild_s = std::max(st.rebuild_s, std::stod((*it)[3]));
    st.transfer_s = std::max(st.transfer_s, std::stod((*it)[4]));
  }
  static const std::regex cuda_init(R"(\[train \d+\] recovered .* cuda_init_s=([0-9.]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), cuda_init);
       it != std::sregex_iterator(); ++it)
    st.cuda_init_s = std::max(st.cuda_init_s, std::stod((*it)[1]));
  return st;
}

double LastRecovered(const std::string& out) {
  static const std::regex re(R"(\[train \d+\] recovered .* t=([0-9.]+))");
  double last = -1;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    last = std::max(last, std::stod((*it)[1]));
  return last;
}

}  // namespace rtft::bench
