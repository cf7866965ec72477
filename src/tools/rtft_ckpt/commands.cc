// ls, verify, dump and config. Reading goes through the library's reader side (versions.h,
// reader.h), so the tool sees exactly what Restore would.
#include "tools/rtft_ckpt/commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/commit/commit.h"
#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/naming.h"
#include "checkpoint/read/versions.h"
#include "core/params.h"
#include "rtft/checkpoint.h"

namespace rtft::tools {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const Status& s) {
  std::fprintf(stderr, "rtft-ckpt: %s\n", s.message().c_str());
  return 1;
}

// Bytes of the regular files in a version directory, and how many of them are rank files.
void DirectoryUsage(const std::string& path, uint64_t* bytes, int* rank_files) {
  *bytes = 0;
  *rank_files = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    *bytes += entry.file_size(ec);
    int rank;
    if (ParseRankFileName(entry.path().filename().string(), &rank)) ++*rank_files;
  }
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Prints "verifying: 42.0% (1.2 GiB of 2.9 GiB), 1.85 GB/s" at most every half second, and only
// once the verify has run that long; on a terminal the line is rewritten in place.
class ProgressLine {
 public:
  ProgressLine() : start_(Clock::now()), last_(start_), tty_(::isatty(STDERR_FILENO)) {}
  ~ProgressLine() {
    if (printed_ && tty_) std::fputc('\n', stderr);
  }
  void Update(const VerifyProgress& p) {
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    printed_ = true;
    const double pct = p.bytes_total ? 100.0 * p.bytes_done / p.bytes_total : 100.0;
    std::fprintf(stderr, "%sverifying: %.1f%% (%s of %s), %.2f GB/s%s", tty_ ? "\r" : "", pct,
                 FormatBytes(p.bytes_done).c_str(), FormatBytes(p.bytes_total).c_str(),
                 p.bytes_done / 1e9 / Seconds(start_), tty_ ? "   " : "\n");
    std::fflush(stderr);
  }

 private:
  Clock::time_point start_, last_;
  bool tty_;
  bool printed_ = false;
};

// What the writer vouched for (docs/format.md, "Certification"), in a word or two.
std::string MarksText(const VersionMarks& m) {
  std::string s = !m.checked ? "-" : m.agreed ? "agreed" : "DISAGREED";
  return m.replayed ? s + ",replayed" : s;
}

// The marks of `version` as its global manifest records them (none when it cannot be read).
VersionMarks MarksOf(const std::string& dir, uint64_t version) {
  auto versions = ListVersions(dir);
  if (!versions.ok()) return {};
  for (const VersionInfo& v : *versions)
    if (v.version == version) return v.marks;
  return {};
}

}  // namespace

int ListCommand(const std::string& dir) {
  auto versions = ListVersions(dir);
  if (!versions.ok()) return Fail(versions.status());
  std::optional<uint64_t> latest;
  auto l = LatestVersion(dir);
  if (l.ok()) {
    latest = *l;
  } else if (l.status().code() != StatusCode::kNotFound) {
    std::fprintf(stderr, "rtft-ckpt: warning: %s\n", l.status().message().c_str());
  }
  std::printf("%-8s %-10s %6s %12s %-10s  %s\n", "VERSION", "STATE", "RANKS", "SIZE", "COPIES",
              "PATH");
  for (const VersionInfo& v : *versions) {
    uint64_t bytes;
    int rank_files;
    DirectoryUsage(v.path, &bytes, &rank_files);
    std::string ranks =
        v.complete ? std::to_string(v.world_size) : std::to_string(rank_files) + "/?";
    std::printf("%-8llu %-10s %6s %12s %-10s  %s%s\n", static_cast<unsigned long long>(v.version),
                v.complete ? "complete" : "incomplete", ranks.c_str(), FormatBytes(bytes).c_str(),
                v.complete ? MarksText(v.marks).c_str() : "?", v.path.c_str(),
                latest && *latest == v.version ? "  <- LATEST" : "");
  }
  return 0;
}

int VerifyCommand(const std::string& dir, std::optional<uint64_t> version) {
  if (!version) {
    auto latest = LatestVersion(dir);
    if (!latest.ok()) return Fail(latest.status());
    version = *latest;
  }
  const auto start = Clock::now();
  uint64_t total = 0;
  Status s;
  {
    ProgressLine line;
    s = VerifyVersion(dir, *version, [&](const VerifyProgress& p) {
      total = p.bytes_total;
      line.Update(p);
    });
  }
  if (!s.ok()) return Fail(s);
  const double secs = Seconds(start);
  std::printf("version %llu of %s: OK, %s verified in %.2f s (%.2f GB/s)\n",
              static_cast<unsigned long long>(*version), dir.c_str(), FormatBytes(total).c_str(),
              secs, secs > 0 ? total / 1e9 / secs : 0.0);
  // The checksums say the bytes are those written; the marks, what the writer knew of them.
  const VersionMarks marks = MarksOf(dir, *version);
  std::printf("version %llu: replicated copies %s; its compute %s\n",
              static_cast<unsigned long long>(*version),
              !marks.checked ? "not compared by the writer"
              : marks.agreed ? "agreed when written"
                             : "DISAGREED when written",
              marks.replayed ? "checked by a replay" : "not replayed");
  return 0;
}

int DumpCommand(const std::string& file) {
  std::string text;
  auto io = CreateReadBackend();
  if (!io.ok()) return Fail(io.status());
  // The user named this path: a link is followed, but it must lead to a regular file.
  auto opened = (*io)->Open(file, {OpenMode::kReadOnly, false, /*follow_symlinks=*/true});
  if (!opened.ok()) return Fail(opened.status());
  if (std::filesystem::path(file).filename() == "MANIFEST.json") {
    auto read = ReadSmallFile(opened->get());
    if (!read.ok()) return Fail(read.status());
    auto global = GlobalManifest::FromJson(*read);
    if (!global.ok()) return Fail(global.status().Annotate(file));
    text = *read;
  } else {
    auto json = ReadFileManifestJson(opened->get());
    if (!json.ok()) return Fail(json.status());
    auto manifest = FileManifest::FromJson(*json);
    if (!manifest.ok()) return Fail(manifest.status().Annotate(file));
    text = *json;
  }
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::printf("%s\n", parsed.dump(2).c_str());
  return 0;
}

int ConfigCommand() {
  std::printf("%-30s %-10s %-10s %s\n", "SETTING", "VALUE", "DEFAULT", "DESCRIPTION");
  for (const ParamInfo& p : AllParams()) {
    std::printf("%-30s %-10s %-10s %s\n", p.env, ParamString(p.id).c_str(), p.default_value,
                p.description);
  }
  return 0;
}

}  // namespace rtft::tools
