// Helpers shared by tests: temporary directories on a real disk (not tmpfs, so O_DIRECT is
// exercised) and running shell commands.
#pragma once

#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <string>

namespace rtft {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("RTFT_TEST_TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/var/tmp") + "/rtft-test-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    if (made) path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty() && !std::getenv("RTFT_KEEP_TEST_FILES"))
      std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs a shell command and returns its standard output and error.
inline std::string RunCommand(const std::string& cmd, int* exit_code = nullptr) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (exit_code) *exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

}  // namespace rtft
