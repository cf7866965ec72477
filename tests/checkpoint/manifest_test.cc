// Manifests are input from outside: FromJson accepts exactly the types and ranges of
// docs/format.md and names the field that is wrong. Each case here was accepted (silently
// converted, overflowed or ignored) before the reader became strict.
#include "checkpoint/layout/manifest.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "checkpoint/layout/json_fields.h"

namespace rtft {
namespace {

using nlohmann::json;

json ValidFileManifest() {
  FileManifest m;
  m.version = 7;
  m.rank = 1;
  m.world_size = 2;
  m.chunk_bytes = 4096;
  m.created_unix_ms = 1700000000000;
  TensorEntry t;
  t.name = "model/w";
  t.dtype = DType::kFloat32;
  t.shape = {4, 1024};
  t.shard.global_shape = {8, 1024};
  t.shard.offset = {4, 0};
  t.offset = 8192;
  t.bytes = 4 * 1024 * 4;
  t.xxh3 = {1, 2, 3, 4};
  m.tensors.push_back(t);
  ObjectEntry o;
  o.name = "step";
  o.offset = 100;
  o.bytes = 2;
  o.xxh3 = 5;
  m.objects.push_back(o);
  return json::parse(m.ToJson());
}

json ValidGlobalManifest() {
  GlobalManifest g;
  g.version = 7;
  g.world_size = 2;
  g.files = {{0, "rank-00000.h5", 100, 1}, {1, "rank-00001.h5", 100, 2}};
  return json::parse(g.ToJson());
}

// FromJson's error on `j`, which must be a DataLoss that mentions `words`.
void ExpectRefused(const json& j, const std::string& words, bool global = false) {
  const std::string text = j.dump();
  Status s =
      global ? GlobalManifest::FromJson(text).status() : FileManifest::FromJson(text).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s << "\nfor " << text;
  EXPECT_NE(s.message().find(words), std::string::npos) << s;
}

TEST(Manifest, ValidManifestsRoundTrip) {
  auto m = FileManifest::FromJson(ValidFileManifest().dump());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->rank, 1);
  EXPECT_EQ(m->tensors.at(0).shard.offset, (std::vector<int64_t>{4, 0}));
  auto g = GlobalManifest::FromJson(ValidGlobalManifest().dump());
  ASSERT_TRUE(g.ok()) << g.status();
}

// The optional `certified` marks (docs/format.md, "Certification"): absent when nothing is
// marked, round-tripped when present, refused when malformed; a version has what every file has.
TEST(Manifest, CertificationMarksAreOptionalAndStrict) {
  json plain = ValidFileManifest();
  EXPECT_FALSE(plain.contains("certified"));
  auto m = FileManifest::FromJson(plain.dump());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->marks.checked || m->marks.agreed || m->marks.replayed);
  m->marks.checked = m->marks.agreed = true;
  auto again = FileManifest::FromJson(m->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->marks.checked && again->marks.agreed && !again->marks.replayed);
  GlobalManifest g = *GlobalManifest::FromJson(ValidGlobalManifest().dump());
  g.marks.replayed = true;
  auto g2 = GlobalManifest::FromJson(g.ToJson());
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_TRUE(g2->marks.replayed && !g2->marks.checked);
  for (bool global : {false, true}) {
    json j = global ? ValidGlobalManifest() : ValidFileManifest();
    j["certified"] = true;
    ExpectRefused(j, "'certified' must be an object", global);
    j["certified"] = {{"checked", true}, {"agreed", true}};
    ExpectRefused(j, "'certified.replayed' is missing", global);
    j["certified"] = {{"checked", 1}, {"agreed", true}, {"replayed", false}};
    ExpectRefused(j, "'certified.checked' must be true or false", global);
    j["certified"] = {{"checked", false}, {"agreed", true}, {"replayed", false}};
    ExpectRefused(j, "'certified.agreed' is true of copies never checked", global);
  }
  // A version's marks: only what every file has.
  VersionMarks agreed{true, true, false}, unchecked{}, replayed{true, true, true};
  VersionMarks all = CombineMarks({agreed, replayed});
  EXPECT_TRUE(all.checked && all.agreed && !all.replayed);
  all = CombineMarks({agreed, unchecked});
  EXPECT_FALSE(all.checked || all.agreed || all.replayed);
  all = CombineMarks({replayed, replayed});
  EXPECT_TRUE(all.checked && all.agreed && all.replayed);
  all = CombineMarks({});
  EXPECT_FALSE(all.checked || all.agreed || all.replayed);
}

TEST(Manifest, IntegersMustBeIntegersOfTheirRange) {
  json j = ValidFileManifest();
  j["version"] = 7.0;
  ExpectRefused(j, "'version' must be a non-negative integer, not a fractional number");
  j = ValidFileManifest();
  j["version"] = 7.5;
  ExpectRefused(j, "'version'");
  j = ValidFileManifest();
  j["version"] = "7";
  ExpectRefused(j, "'version' must be a non-negative integer, not string");
  j = ValidFileManifest();
  j["chunk_bytes"] = -4096;
  ExpectRefused(j, "'chunk_bytes' must be a non-negative integer, not an integer");
  j = ValidFileManifest();
  j["rank"] = 1.0;
  ExpectRefused(j, "'rank' must be an integer");
  j = ValidFileManifest();
  j["rank"] = 4294967297ull;  // would have been converted to 1
  ExpectRefused(j, "'rank' is 4294967297");
  j = ValidFileManifest();
  j["tensors"][0]["offset"] = 8192.5;
  ExpectRefused(j, "'tensors[0].offset'");
  j = ValidFileManifest();
  j["tensors"][0]["shape"][1] = 1024.0;
  ExpectRefused(j, "'tensors[0].shape[1]'");
  j = ValidFileManifest();
  j["tensors"][0]["shape"][1] = -1;
  ExpectRefused(j, "'tensors[0].shape[1]'");
  j = ValidFileManifest();
  j["chunk_bytes"] = 4097;  // chunks would split values
  ExpectRefused(j, "'chunk_bytes' is not a positive multiple of 8");
  j = ValidFileManifest();
  j["format_version"] = 1.0;
  ExpectRefused(j, "'format_version' must be an integer");
}

TEST(Manifest, WorldSizeAndRankMustMakeSense) {
  json j = ValidFileManifest();
  j["world_size"] = 0;
  ExpectRefused(j, "'world_size' is 0");
  j = ValidFileManifest();
  j["rank"] = 2;  // of world size 2
  ExpectRefused(j, "'rank' is 2");
  json g = ValidGlobalManifest();
  g["world_size"] = 0;
  g["files"] = json::array();
  ExpectRefused(g, "'world_size' is 0", /*global=*/true);
  g = ValidGlobalManifest();
  g["files"][1]["rank"] = 0;
  ExpectRefused(g, "a second time", true);
  g = ValidGlobalManifest();
  g["files"][1]["rank"] = 2;
  ExpectRefused(g, "'files[1].rank' is 2", true);
  g = ValidGlobalManifest();
  g["files"][1]["bytes"] = 1e2;
  ExpectRefused(g, "'files[1].bytes'", true);
}

TEST(Manifest, SizesThatOverflowAreRefused) {
  json j = ValidFileManifest();
  // 2^62 x 4 bytes wraps to 0 in 64 bits; a reader that multiplied unchecked would accept it
  // with "bytes": 0.
  j["tensors"][0]["shape"] = {4611686018427387904ull};
  j["tensors"][0].erase("global_shape");
  j["tensors"][0].erase("shard_offset");
  j["tensors"][0]["bytes"] = 0;
  j["tensors"][0]["xxh3"] = {"2d06800538d394c2"};
  ExpectRefused(j, "more than 2^64 bytes");
  j = ValidFileManifest();
  j["tensors"][0]["shard_offset"] = {9223372036854775807ll, 0};
  ExpectRefused(j, "outside global_shape");
  j = ValidFileManifest();
  j["tensors"][0]["shape"] = json::array();
  for (int d = 0; d < 40; ++d) j["tensors"][0]["shape"].push_back(1);
  ExpectRefused(j, "more than 32");
}

TEST(Manifest, DuplicateNamesAreRefused) {
  json j = ValidFileManifest();
  j["tensors"].push_back(j["tensors"][0]);
  ExpectRefused(j, "tensor 'model/w' twice");
  j = ValidFileManifest();
  j["objects"].push_back(j["objects"][0]);
  ExpectRefused(j, "object 'step' twice");
  j = ValidFileManifest();
  j["tensors"][0]["name"] = "";
  ExpectRefused(j, "empty name");
}

TEST(Manifest, ChecksumsMustMatchTheChunkCount) {
  json j = ValidFileManifest();
  j["tensors"][0]["xxh3"].push_back("0000000000000001");
  ExpectRefused(j, "has 5 checksums, not the 4");
  j = ValidFileManifest();
  j["tensors"][0]["xxh3"][2] = 3;
  ExpectRefused(j, "'tensors[0].xxh3[2]' is not a checksum");
  j = ValidFileManifest();
  j["objects"][0]["xxh3"] = "xyz";
  ExpectRefused(j, "'objects[0].xxh3' is not a checksum");
}

TEST(Manifest, ShapesOfTheWrongKindAreRefused) {
  json j = ValidFileManifest();
  j["tensors"] = json::object();
  ExpectRefused(j, "'tensors' must be a list");
  j = ValidFileManifest();
  j["tensors"][0] = 5;
  ExpectRefused(j, "is not an object");
  j = ValidFileManifest();
  j["tensors"][0]["dataset"] = 5;
  ExpectRefused(j, "'tensors[0].dataset' must be a string");
  j = ValidFileManifest();
  j["tensors"][0]["shard_offset"] = {4};
  ExpectRefused(j, "as many dimensions as shape");
}

TEST(Manifest, DeepNestingIsRefusedBeforeParsing) {
  std::string deep = "{\"format\":\"rt-ft checkpoint\",\"x\":";
  for (int i = 0; i < 100000; ++i) deep += '[';
  Status s = FileManifest::FromJson(deep).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("nests deeper"), std::string::npos) << s;
  // Brackets inside strings do not count.
  EXPECT_TRUE(CheckJsonDepth("{\"a\":\"[[[[[[[[[[[[[[[[[[[[[[\\\"[[[[[[\"}").ok());
  EXPECT_FALSE(CheckJsonDepth("[[[[[[[[[1]]]]]]]]]").ok());
}

// A float64 tensor entry of format version 2 (the ValidFileManifest tensor retyped: 8 bytes per
// element, twice the chunks).
json Float64Manifest() {
  json j = ValidFileManifest();
  j["format_version"] = 2;
  j["tensors"][0]["dtype"] = "float64";
  j["tensors"][0]["bytes"] = 4 * 1024 * 8;
  j["tensors"][0]["xxh3"] = {"0000000000000001", "0000000000000002", "0000000000000003",
                             "0000000000000004", "0000000000000005", "0000000000000006",
                             "0000000000000007", "0000000000000008"};
  return j;
}

TEST(Manifest, Float64TensorsRoundTripInFormatVersion2) {
  auto m = FileManifest::FromJson(Float64Manifest().dump());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->format_version, 2);
  EXPECT_EQ(m->tensors.at(0).dtype, DType::kFloat64);
  EXPECT_EQ(m->tensors.at(0).bytes, 32768u);
  auto again = FileManifest::FromJson(m->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(json::parse(again->ToJson())["tensors"][0]["dtype"], "float64");
}

TEST(Manifest, Float64IsRefusedInAFileThatClaimsFormatVersion1) {
  // Every earlier rt-ft reads version 1 and knows no float64: a file that says 1 and holds one
  // was not written by rt-ft.
  json j = Float64Manifest();
  j["format_version"] = 1;
  ExpectRefused(j, "tensor 'model/w' has dtype float64, which format version 1 does not have");
  // float64 elements are 8 bytes: the float32 byte count of the same shape is refused.
  j = Float64Manifest();
  j["tensors"][0]["bytes"] = 4 * 1024 * 4;
  j["tensors"][0]["xxh3"] = {"0000000000000001", "0000000000000002", "0000000000000003",
                             "0000000000000004"};
  ExpectRefused(j, "does not match shape and dtype (32768)");
  // 2^61 elements of 8 bytes wrap to 0 in 64 bits.
  j = Float64Manifest();
  j["tensors"][0]["shape"] = {2305843009213693952ull};
  j["tensors"][0].erase("global_shape");
  j["tensors"][0].erase("shard_offset");
  j["tensors"][0]["bytes"] = 0;
  j["tensors"][0]["xxh3"] = {"2d06800538d394c2"};
  ExpectRefused(j, "more than 2^64 bytes");
}

TEST(Manifest, VersionsNewerThanThisReaderAskForAnUpgrade) {
  for (bool global : {false, true}) {
    json j = global ? ValidGlobalManifest() : Float64Manifest();
    j["format_version"] = kFormatVersion + 1;
    const std::string text = j.dump();
    Status s =
        global ? GlobalManifest::FromJson(text).status() : FileManifest::FromJson(text).status();
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s;
    EXPECT_NE(s.message().find("upgrade rt-ft"), std::string::npos) << s;
  }
  json g = ValidGlobalManifest();
  g["format_version"] = 2;
  auto ok = GlobalManifest::FromJson(g.dump());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->format_version, 2);
}

TEST(Manifest, EachDtypeHasTheOldestFormatVersionThatDefinesIt) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kInt32,
                  DType::kInt64, DType::kUInt8})
    EXPECT_EQ(FormatVersionOf(d), 1) << DTypeName(d);
  EXPECT_EQ(FormatVersionOf(DType::kFloat64), 2);
  EXPECT_EQ(FormatVersionFor({}), 1);
  EXPECT_EQ(FormatVersionFor({DType::kFloat32, DType::kBFloat16}), 1);
  EXPECT_EQ(FormatVersionFor({DType::kFloat32, DType::kFloat64, DType::kInt8}), 2);
  EXPECT_LE(FormatVersionFor({DType::kFloat64}), kFormatVersion);
}

TEST(Manifest, TextThatIsNotUtf8IsRefused) {
  std::string text = ValidFileManifest().dump();
  const size_t at = text.find("model/w");
  ASSERT_NE(at, std::string::npos);
  text[at] = '\xff';
  Status s = FileManifest::FromJson(text).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s;
}

}  // namespace
}  // namespace rtft
