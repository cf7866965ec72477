#include "bench/common/bench_json_lines.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace rtft::bench {
namespace {

// Reads the whole file through the descriptor that was checked: a regular file (O_NONBLOCK:
// a FIFO in its place is refused, never waited on) of `max_bytes` at most.
StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::InvalidArgument(path + ": " + std::strerror(errno));
  struct stat st {};
  std::string data;
  Status s;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = Status::InvalidArgument(path + ": not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    s = Status::InvalidArgument(path + ": larger than " + std::to_string(max_bytes) +
                                " bytes, not a file of JSON lines");
  } else {
    data.resize(static_cast<size_t>(st.st_size) + 1);
    size_t got = 0;
    while (got < data.size()) {
      const ssize_t n = ::read(fd, &data[got], data.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) s = Status::InvalidArgument(path + ": " + std::strerror(errno));
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (s.ok() && got > static_cast<size_t>(st.st_size))
      s = Status::InvalidArgument(path + ": grew while read");
    data.resize(std::min(got, static_cast<size_t>(st.st_size)));
  }
  ::close(fd);
  if (!s.ok()) return s;
  return data;
}

}  // namespace

StatusOr<std::vector<JsonLine>> ReadJsonLines(const std::string& path, size_t max_bytes) {
  RTFT_ASSIGN_OR_RETURN(std::string data, ReadSmallFile(path, max_bytes));
  std::vector<JsonLine> lines;
  std::istringstream in(data);
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return Status::InvalidArgument(path + " line " + std::to_string(number) +
                                     ": not a JSON object");
    lines.push_back(JsonLine{number, std::move(j)});
  }
  return lines;
}

}  // namespace rtft::bench
