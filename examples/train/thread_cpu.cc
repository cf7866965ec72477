#include "thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace train {

std::map<std::string, double> ThreadCpuSeconds() {
  std::map<std::string, double> by_name;
  const long ticks = sysconf(_SC_CLK_TCK);
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr || ticks <= 0) {
    if (dir != nullptr) closedir(dir);
    return by_name;
  }
  while (const dirent* d = readdir(dir)) {
    if (!std::isdigit(static_cast<unsigned char>(d->d_name[0]))) continue;
    std::ifstream in(std::string("/proc/self/task/") + d->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;  // the thread ended meanwhile
    // pid (comm) state ppid ...: the name may hold spaces and parentheses, so it ends at the last
    // ')'; utime and stime are the 14th and 15th fields, the 12th and 13th after it.
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    bool ok = true;
    for (int i = 3; i <= 15 && ok; ++i) {
      ok = static_cast<bool>(rest >> field);
      if (!ok) break;
      if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    }
    if (!ok) continue;
    by_name[line.substr(open + 1, close - open - 1)] += static_cast<double>(utime + stime) / ticks;
  }
  closedir(dir);
  return by_name;
}

std::string FormatThreadCpu(const std::map<std::string, double>& by_name) {
  std::string out;
  for (const auto& [name, seconds] : by_name) {
    std::string clean = name.empty() ? "_" : name;
    for (char& c : clean)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '/' &&
          c != '-')
        c = '_';
    char s[32];
    std::snprintf(s, sizeof(s), ":%.3f", seconds);
    out += (out.empty() ? "" : ",") + clean + s;
  }
  return out;
}

}  // namespace train
