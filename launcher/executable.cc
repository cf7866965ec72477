#include "launcher/executable.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace rtft::launch {

int FindExecutable(const std::string& app, std::string* path) {
  if (app.empty()) return ENOENT;
  auto check = [](const std::string& candidate) -> int {
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0) return errno;
    if (!S_ISREG(st.st_mode)) return EACCES;  // as execve: a directory, a device...
    return ::access(candidate.c_str(), X_OK) != 0 ? errno : 0;
  };
  if (app.find('/') != std::string::npos) {
    const int err = check(app);
    if (err == 0) *path = app;
    return err;
  }
  const char* path_env = std::getenv("PATH");
  const std::string dirs = path_env && *path_env ? path_env : "/bin:/usr/bin";
  int first = ENOENT;
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = (end > begin ? dirs.substr(begin, end - begin) : ".") + "/" + app;
    const int err = check(candidate);
    if (err == 0) {
      *path = candidate;
      return 0;
    }
    // As execvp: a file that exists but may not be run is reported over one that is absent.
    if (err != ENOENT && err != ENOTDIR && first == ENOENT) first = err;
    begin = end + 1;
  }
  return first;
}

StatusOr<std::string> ResolveExecutable(const std::string& app) {
  std::string path;
  const int err = FindExecutable(app, &path);
  if (err == 0) return path;
  return Status::FromErrno(err, "the application '" + app + "' cannot be executed" +
                                    (app.find('/') == std::string::npos ? " (searched PATH)" : ""));
}

}  // namespace rtft::launch
