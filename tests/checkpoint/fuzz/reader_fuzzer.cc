// libFuzzer target for rt-ft's checkpoint reading code (docs/format.md, "Limits"): the manifest
// reader over HDF5 (every object checked before it is read), the manifests' JSON, and the file
// reader's data paths (chunks, objects, checksums). Properties: no input crashes, hangs, leaks or
// reads out of bounds (ASan + UBSan); whatever a manifest parser accepts re-encodes to text it
// accepts again. Inputs are recipes (recipe.h), so files stay valid HDF5 while what rt-ft checks
// varies. LLVMFuzzerInitialize turns real engine-written checkpoints (RTFT_FUZZ_SEED_DIR) into
// seed recipes in the corpus directory, beside built-in seeds for what those files lack (float64,
// format version 2).
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/layout/hdf5_util.h"
#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/read/reader.h"
#include "core/checksum.h"
#include "memory_backend.h"
#include "recipe.h"

namespace {

using rtft::CheckpointFileReader;
using rtft::FileManifest;
using rtft::GlobalManifest;
using rtft::fuzz::MemoryBackend;
using rtft::fuzz::Recipe;

constexpr size_t kMaxJson = 1 << 20;
constexpr const char* kPath = "rank-00000.h5";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

template <typename Manifest>
void RoundTrip(const std::string& text) {
  auto m = Manifest::FromJson(text);
  if (!m.ok()) return;
  auto again = Manifest::FromJson(m->ToJson());
  Check(again.ok(), "an accepted manifest re-encodes to one that is refused");
}

// RTFT_FUZZ_DEBUG=1 prints how far each input got (to see whether seeds reach the data paths).
void Debug(const char* step, const rtft::Status& s) {
  static const bool on = std::getenv("RTFT_FUZZ_DEBUG") != nullptr;
  if (on) std::fprintf(stderr, "%s: %s\n", step, s.ToString().c_str());
}

void ReadEverything(MemoryBackend* io) {
  auto reader = CheckpointFileReader::Open(kPath, io);
  Debug("open", reader.status());
  if (!reader.ok()) return;
  const CheckpointFileReader& r = **reader;
  RoundTrip<FileManifest>(r.manifest_json());
  Debug("verify", r.VerifyAll());
  for (const rtft::TensorEntry& t : r.manifest().tensors) {
    std::vector<char> chunk;
    const uint64_t chunks = rtft::ChunkCount(t.bytes, r.chunk_bytes());
    for (uint64_t c = 0; c < chunks && c < 64; ++c) {
      chunk.resize(r.ChunkSize(t, c));
      (void)r.ReadTensorChunk(t, c, chunk.data(), /*verify=*/c % 2 == 0);
    }
    (void)r.ReadTensorChunk(t, chunks, chunk.data());  // one past the end: refused
  }
  for (const rtft::ObjectEntry& o : r.manifest().objects) (void)r.ReadObject(o);
}

void WriteSeed(const Recipe& r, const std::string& corpus) {
  const std::string encoded = rtft::fuzz::EncodeRecipe(r);
  const std::string name =
      corpus + "/seed-" + rtft::ChecksumToHex(rtft::Xxh3(encoded.data(), encoded.size()));
  std::ofstream(name, std::ios::binary) << encoded;
}

// A seed recipe for each real rank file and MANIFEST.json under `dir`.
void WriteSeeds(const std::string& dir, const std::string& corpus) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<Recipe> recipes;
    if (entry.path().filename() == "MANIFEST.json") {
      Recipe r;
      r.mode = 1;
      r.json = bytes;
      recipes.push_back(r);
    } else if (entry.path().extension() == ".h5") {
      MemoryBackend io;
      auto file = io.Open(kPath, {rtft::OpenMode::kCreate, false});
      if (!file.ok() || !(*file)->Write({{0, bytes.data(), bytes.size()}}).ok()) continue;
      auto reader = CheckpointFileReader::Open(kPath, &io);
      if (!reader.ok()) continue;
      Recipe r;
      r.json = (*reader)->manifest_json();
      for (const rtft::TensorEntry& t : (*reader)->manifest().tensors) {
        if (r.tensors.size() == 16) break;
        rtft::fuzz::TensorRecipe tr;
        tr.dtype = static_cast<uint8_t>(t.dtype);
        for (size_t d = 0; d < t.shape.size() && d < 3; ++d)
          tr.dims.push_back(static_cast<uint16_t>(std::min<int64_t>(t.shape[d], 2047)));
        r.tensors.push_back(tr);
      }
      for (uint8_t fix : {0, 1, 2}) {
        r.fix = fix;
        recipes.push_back(r);
      }
      Recipe text;
      text.mode = 2;
      text.json = r.json;
      recipes.push_back(text);
    }
    for (const Recipe& r : recipes) WriteSeed(r, corpus);
  }
}

// Seeds that real engine files may lack: a format-version-2 file with float64 tensors (a sharded
// one and a scalar) beside a float32 one, made valid by the recipe's fix step; the same manifest
// claiming format version 1 (refused); and its text alone.
void WriteBuiltInSeeds(const std::string& corpus) {
  FileManifest m;
  m.format_version = 2;
  m.chunk_bytes = 64;
  rtft::TensorEntry u{"solver/u", rtft::DType::kFloat64, {3, 5}, {{6, 5}, {3, 0}}, 0, 120, {}};
  rtft::TensorEntry t{"solver/t", rtft::DType::kFloat64, {}, {}, 0, 8, {}};
  rtft::TensorEntry w{"model/w", rtft::DType::kFloat32, {7}, {}, 0, 28, {}};
  for (rtft::TensorEntry* e : {&u, &t, &w}) e->xxh3.assign(rtft::ChunkCount(e->bytes, 64), 0);
  m.tensors = {u, t, w};
  Recipe r;
  r.attr_value = 2;
  r.tensors = {{7, {3, 5}}, {7, {}}, {0, {7}}};
  r.json = m.ToJson();
  for (uint8_t fix : {0, 1, 2}) {
    r.fix = fix;
    WriteSeed(r, corpus);
  }
  m.format_version = 1;
  r.attr_value = 1;
  r.json = m.ToJson();
  WriteSeed(r, corpus);
  Recipe text;
  text.mode = 2;
  text.json = r.json;
  WriteSeed(text, corpus);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  rtft::SilenceHdf5Errors();
  const char* seeds = std::getenv("RTFT_FUZZ_SEED_DIR");
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = (*argv)[i];
    if (!arg.empty() && arg[0] != '-') {
      WriteBuiltInSeeds(arg);
      if (seeds != nullptr && *seeds != '\0') WriteSeeds(seeds, arg);
      break;
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Recipe r = rtft::fuzz::DecodeRecipe(data, size);
  if (r.json.size() > kMaxJson) return 0;
  switch (r.mode) {
    case 1:
      RoundTrip<GlobalManifest>(r.json);
      return 0;
    case 2:
      RoundTrip<FileManifest>(r.json);
      return 0;
    default:
      break;
  }
  MemoryBackend io;
  auto file = io.Open(kPath, {rtft::OpenMode::kCreate, false});
  if (!file.ok() || !rtft::fuzz::BuildRankFile(r, file->get()).ok()) return 0;
  ReadEverything(&io);
  return 0;
}
