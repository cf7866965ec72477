// Reads a file of JSON lines that another rtft-bench run wrote (the measured figures
// `rtft-bench goodput` uses). The file comes from outside: a regular file only, bounded in size
// before anything is read, every non-blank line a JSON object.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtft/status.h"

namespace rtft::bench {

struct JsonLine {
  int number;  // 1-based line number, for messages
  nlohmann::json json;
};

// InvalidArgument naming the file (and the line) for a file that cannot be opened, is not a
// regular file (a FIFO is refused, never waited on), is larger than `max_bytes`, or holds a
// line that is not a JSON object.
StatusOr<std::vector<JsonLine>> ReadJsonLines(const std::string& path, size_t max_bytes);

}  // namespace rtft::bench
