// RTFT_* environment parameters. Each is declared once in param_list.h with its default and a
// one-line description. The environment is read once, at the first call of any reader (the
// library never writes it: a launcher sets a child's variables before exec); an unset or empty
// variable reads as its default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rtft/status.h"

namespace rtft {

enum class ParamType { kString, kInt, kBool, kBytes };

enum class Param {
#define RTFT_PARAM(id, env, type, def, desc) id,
#include "core/param_list.h"
#undef RTFT_PARAM
};

struct ParamInfo {
  Param id;
  const char* env;
  ParamType type;
  const char* default_value;
  const char* description;
};

const std::vector<ParamInfo>& AllParams();
const ParamInfo& GetParamInfo(Param id);

// The environment's value, or the default when unset or empty.
std::string ParamString(Param id);
// Whether the environment gave the variable a non-empty value.
bool ParamIsSet(Param id);
// Reads the environment again: for tests that change it, and for a launcher's own settings
// after it parsed its flags. Not thread-safe against readers of the same variables' values.
void ReloadParams();
// Typed readers; a malformed value is an InvalidArgument naming the variable.
StatusOr<int64_t> ParamInt(Param id);
StatusOr<bool> ParamBool(Param id);
StatusOr<uint64_t> ParamBytes(Param id);

// "4096", "64K", "1.5G", "2GiB" -> bytes (binary multiples). Rejects negatives and junk.
StatusOr<uint64_t> ParseBytes(const std::string& text);
// 1536 -> "1.5 KiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace rtft
