#include "core/params.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "core/check.h"

namespace rtft {

const std::vector<ParamInfo>& AllParams() {
  // Never destroyed: threads still running while the process exits may read it.
  static const std::vector<ParamInfo>& kParams = *new std::vector<ParamInfo>{
#define RTFT_PARAM(id, env, type, def, desc) {Param::id, env, ParamType::type, def, desc},
#include "core/param_list.h"
#undef RTFT_PARAM
  };
  return kParams;
}

const ParamInfo& GetParamInfo(Param id) {
  const auto& all = AllParams();
  size_t index = static_cast<size_t>(id);
  RTFT_CHECK(index < all.size() && all[index].id == id);
  return all[index];
}

namespace {

// The environment's non-empty values of every declared variable, read once.
class ParamValues {
 public:
  static ParamValues& Get() {
    static ParamValues* values = new ParamValues;  // never destroyed: read until the end
    return *values;
  }
  void Reload() {
    std::lock_guard<std::mutex> lock(mu_);
    values_.clear();
    for (const ParamInfo& p : AllParams()) {
      const char* v = std::getenv(p.env);
      values_.push_back(v && *v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  std::optional<std::string> Value(Param id) {
    std::lock_guard<std::mutex> lock(mu_);
    return values_[static_cast<size_t>(id)];
  }

 private:
  ParamValues() { Reload(); }
  std::mutex mu_;
  std::vector<std::optional<std::string>> values_;
};

}  // namespace

void ReloadParams() { ParamValues::Get().Reload(); }

bool ParamIsSet(Param id) {
  (void)GetParamInfo(id);
  return ParamValues::Get().Value(id).has_value();
}

std::string ParamString(Param id) {
  const ParamInfo& info = GetParamInfo(id);
  return ParamValues::Get().Value(id).value_or(info.default_value);
}

StatusOr<int64_t> ParamInt(Param id) {
  std::string text = ParamString(id);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0')
    return Status::InvalidArgument(std::string(GetParamInfo(id).env) + "='" + text +
                                   "' is not an integer");
  return static_cast<int64_t>(v);
}

StatusOr<bool> ParamBool(Param id) {
  std::string t = ParamString(id);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  return Status::InvalidArgument(std::string(GetParamInfo(id).env) + "='" + t +
                                 "' is not a boolean (use 1/0, true/false, yes/no, on/off)");
}

StatusOr<uint64_t> ParamBytes(Param id) {
  auto v = ParseBytes(ParamString(id));
  if (!v.ok()) return v.status().Annotate(GetParamInfo(id).env);
  return v;
}

StatusOr<uint64_t> ParseBytes(const std::string& text) {
  if (text.empty() || text[0] == '-')
    return Status::InvalidArgument("'" + text + "' is not a size");
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(v) || v < 0)
    return Status::InvalidArgument("'" + text + "' is not a size");
  std::string suffix(end);
  double mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else {
    char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    std::string rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "iB" || rest == "ib"))
      return Status::InvalidArgument("'" + text + "' has an unknown unit (use K, M, G, T)");
    switch (unit) {
      case 'K':
        mult = 1024.0;
        break;
      case 'M':
        mult = 1024.0 * 1024;
        break;
      case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return Status::InvalidArgument("'" + text + "' has an unknown unit (use K, M, G, T)");
    }
  }
  double bytes = v * mult;
  if (bytes > 1.8e19) return Status::OutOfRange("'" + text + "' is too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace rtft
