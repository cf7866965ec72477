#include "recipe.h"

#include <hdf5.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "checkpoint/layout/hdf5_driver.h"
#include "checkpoint/layout/manifest.h"
#include "core/checksum.h"
#include "rtft/state.h"

namespace rtft::fuzz {
namespace {

constexpr int kDTypes = 8;  // every DType, float64 (7) included
constexpr int kMaxTensors = 16;

class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | Byte() << 8); }
  int32_t I32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(Byte()) << (8 * i);
    return static_cast<int32_t>(v);
  }
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(data_) + std::min(at_, size_),
                  size_ - std::min(at_, size_));
    at_ = size_;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

void Put16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}

H5Handle Handle(hid_t id, H5Handle::Closer closer) { return H5Handle(id, closer); }

void WriteAttribute(hid_t file, const Recipe& r) {
  hid_t type = H5T_STD_I32LE;
  H5Handle space = Handle(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle owned_type;
  std::vector<char> value(8 * 256 + 64, 0);
  std::memcpy(value.data(), &r.attr_value, sizeof(r.attr_value));
  switch (r.attr_kind % 8) {
    case 1:
      return;
    case 2: {
      hsize_t n = r.attr_count;
      space = Handle(H5Screate_simple(1, &n, nullptr), H5Sclose);
      break;
    }
    case 3: {
      type = H5T_IEEE_F64LE;
      const double d = r.attr_value;
      std::memcpy(value.data(), &d, sizeof(d));
      break;
    }
    case 4:
      owned_type = Handle(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(owned_type.get(), 1 + r.attr_count);
      type = owned_type.get();
      break;
    case 5:
      type = H5T_STD_I8LE;
      break;
    case 6:
      type = H5T_STD_I64LE;
      break;
    case 7: {
      hsize_t dims[2] = {static_cast<hsize_t>(1 + r.attr_count % 16), 16};
      space = Handle(H5Screate_simple(2, dims, nullptr), H5Sclose);
      break;
    }
    default:
      break;
  }
  H5Handle attr =
      Handle(H5Acreate2(file, "rtft_format_version", type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
             H5Aclose);
  if (attr.valid()) H5Awrite(attr.get(), type, value.data());
}

// The tensor datasets; returns each one's offset and byte count.
std::vector<std::pair<uint64_t, uint64_t>> WriteTensors(hid_t file, const Recipe& r) {
  std::vector<std::pair<uint64_t, uint64_t>> placed;
  H5Handle lcpl = Handle(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorRecipe& t = r.tensors[i];
    // A dataset of the tensor's bytes (what rt-ft writes is raw bytes at an offset), capped so a
    // run stays fast.
    hsize_t bytes = DTypeSize(static_cast<DType>(t.dtype % kDTypes));
    for (uint16_t d : t.dims) bytes = std::min<hsize_t>(bytes * d, 256 << 10);
    H5Handle space = Handle(H5Screate_simple(1, &bytes, nullptr), H5Sclose);
    const std::string name = "/tensors/t" + std::to_string(i);
    H5Handle ds = Handle(H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space.get(), lcpl.get(),
                                    H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose);
    if (!ds.valid()) continue;
    // Bytes are a function of their position, so that checksums are not all alike.
    std::vector<uint8_t> data(bytes);
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k * 31 + i);
    if (!data.empty())
      H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
    const haddr_t offset = H5Dget_offset(ds.get());
    placed.emplace_back(offset == HADDR_UNDEF ? 0 : offset, data.size());
  }
  return placed;
}

// A dataset for each object the JSON lists (at most 16, each capped), so that fixed entries
// point at real bytes.
std::vector<std::pair<uint64_t, uint64_t>> WriteObjectData(hid_t file, const std::string& json) {
  std::vector<std::pair<uint64_t, uint64_t>> placed;
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("objects") || !j["objects"].is_array())
    return placed;
  H5Handle lcpl = Handle(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  for (size_t i = 0; i < j["objects"].size() && i < 16; ++i) {
    const nlohmann::json& o = j["objects"][i];
    hsize_t bytes = o.is_object() && o.contains("bytes") && o["bytes"].is_number_unsigned()
                        ? std::min<uint64_t>(o["bytes"].get<uint64_t>(), 64 << 10)
                        : 0;
    if (bytes == 0) bytes = 1;
    H5Handle space = Handle(H5Screate_simple(1, &bytes, nullptr), H5Sclose);
    const std::string name = "/objects/o" + std::to_string(i);
    H5Handle ds = Handle(H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space.get(), lcpl.get(),
                                    H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose);
    if (!ds.valid()) break;
    std::vector<uint8_t> data(bytes);
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k * 7 + i);
    H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
    const haddr_t offset = H5Dget_offset(ds.get());
    placed.emplace_back(offset == HADDR_UNDEF ? 0 : offset, data.size());
  }
  return placed;
}

// Points the JSON's tensor entries at the datasets just written (and, with fix 2, gives them the
// checksums of what is there), so that seeds from real files reach the data-reading code.
using Placed = std::vector<std::pair<uint64_t, uint64_t>>;

// With fix 1 and 2, the JSON's objects point at the object datasets (fix 2: their checksums too).
void FixObjects(const Recipe& r, const Placed& placed, File* file, nlohmann::json* j) {
  if (!j->contains("objects") || !(*j)["objects"].is_array()) return;
  auto& objects = (*j)["objects"];
  for (size_t i = 0; i < objects.size() && i < placed.size(); ++i) {
    if (!objects[i].is_object()) continue;
    objects[i]["offset"] = placed[i].first;
    if (r.fix < 2) continue;
    objects[i]["bytes"] = placed[i].second;
    std::vector<char> buf(placed[i].second);
    if (!file->Read({IoRequest{placed[i].first, buf.data(), buf.size()}}).ok()) continue;
    objects[i]["xxh3"] = ChecksumToHex(Xxh3(buf.data(), buf.size()));
  }
}

std::string FixJson(const Recipe& r, const Placed& placed, const Placed& objects, File* file) {
  if (r.fix == 0) return r.json;
  nlohmann::json j = nlohmann::json::parse(r.json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tensors") || !j["tensors"].is_array())
    return r.json;
  auto& tensors = j["tensors"];
  for (size_t i = 0; i < tensors.size() && i < placed.size(); ++i) {
    if (!tensors[i].is_object()) continue;
    tensors[i]["offset"] = placed[i].first;
    if (r.fix < 2 || !tensors[i].contains("bytes") || !tensors[i]["bytes"].is_number_unsigned())
      continue;
    const uint64_t bytes =
        std::min<uint64_t>(tensors[i]["bytes"].get<uint64_t>(), placed[i].second);
    DType dtype = DType::kUInt8;
    if (bytes != tensors[i]["bytes"].get<uint64_t>()) {
      // The dataset was capped: the entry becomes a whole 1-D tensor of what is there.
      if (tensors[i].contains("dtype") && tensors[i]["dtype"].is_string())
        ParseDType(tensors[i]["dtype"].get<std::string>(), &dtype);
      tensors[i]["shape"] = {bytes / DTypeSize(dtype)};
      tensors[i]["bytes"] = bytes / DTypeSize(dtype) * DTypeSize(dtype);
      tensors[i].erase("global_shape");
      tensors[i].erase("shard_offset");
    }
    const uint64_t stored = tensors[i]["bytes"].get<uint64_t>();
    std::vector<char> buf(stored);
    if (stored && !file->Read({IoRequest{placed[i].first, buf.data(), buf.size()}}).ok()) continue;
    uint64_t chunk = j.contains("chunk_bytes") && j["chunk_bytes"].is_number_unsigned()
                         ? j["chunk_bytes"].get<uint64_t>()
                         : 0;
    if (chunk == 0) continue;
    nlohmann::json sums = nlohmann::json::array();
    for (uint64_t at = 0; at < stored || sums.empty(); at += chunk) {
      sums.push_back(ChecksumToHex(Xxh3(buf.data() + at, std::min(chunk, stored - at))));
      if (stored == 0) break;
    }
    tensors[i]["xxh3"] = sums;
  }
  FixObjects(r, objects, file, &j);
  return j.dump();
}

void WriteManifest(hid_t file, const Recipe& r, const std::string& json) {
  switch (r.link_kind % 5) {
    case 1:
      return;
    case 2:
      H5Lcreate_soft("/tensors/t0", file, "/rtft_manifest", H5P_DEFAULT, H5P_DEFAULT);
      return;
    case 3:
      H5Lcreate_external("elsewhere.h5", "/x", file, "/rtft_manifest", H5P_DEFAULT, H5P_DEFAULT);
      return;
    case 4:
      H5Gclose(H5Gcreate2(file, "/rtft_manifest", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      return;
    default:
      break;
  }
  const int64_t wanted = static_cast<int64_t>(json.size()) + r.size_delta;
  const size_t size = static_cast<size_t>(std::max<int64_t>(1, wanted));
  H5Handle type = Handle(H5Tcopy(H5T_C_S1), H5Tclose);
  switch (r.type_kind % 5) {
    case 1:
      H5Tset_size(type.get(), H5T_VARIABLE);
      break;
    case 2:
      type = Handle(H5Tcopy(H5T_STD_I64LE), H5Tclose);
      break;
    case 3:
      H5Tset_size(type.get(), size);
      H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
      break;
    case 4:
      H5Tset_size(type.get(), size);
      H5Tset_cset(type.get(), H5T_CSET_UTF8);
      break;
    default:
      H5Tset_size(type.get(), size);
      H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
      break;
  }
  hsize_t n = 1 + (static_cast<uint8_t>(r.size_delta) & 15);
  H5Handle space = Handle(r.space_kind % 3 == 1   ? H5Screate_simple(1, &n, nullptr)
                          : r.space_kind % 3 == 2 ? H5Screate(H5S_NULL)
                                                  : H5Screate(H5S_SCALAR),
                          H5Sclose);
  H5Handle dcpl = Handle(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const int layout = r.layout_kind % 4;
  if (layout == 1) H5Pset_layout(dcpl.get(), H5D_COMPACT);
  if (layout == 2 && r.space_kind % 3 == 1) H5Pset_chunk(dcpl.get(), 1, &n);
  if (layout == 3) H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_LATE);
  H5Handle ds = Handle(H5Dcreate2(file, "/rtft_manifest", type.get(), space.get(), H5P_DEFAULT,
                                  dcpl.get(), H5P_DEFAULT),
                       H5Dclose);
  if (!ds.valid() || r.written % 2 == 1 || layout == 3) return;
  // Enough bytes for every element of any of the types above.
  std::vector<char> buffer(std::max<size_t>(size, 8) * n + 8, 0);
  std::memcpy(buffer.data(), json.data(), std::min(json.size(), buffer.size()));
  if (r.type_kind % 5 == 1) {
    std::vector<const char*> strings(n, json.c_str());
    H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, strings.data());
  } else {
    H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data());
  }
}

}  // namespace

Recipe DecodeRecipe(const uint8_t* data, size_t size) {
  Cursor in(data, size);
  Recipe r;
  r.mode = in.Byte() % 3;
  if (r.mode != 0) {
    r.json = in.Rest();
    return r;
  }
  r.attr_kind = in.Byte();
  r.attr_value = in.I32();
  r.attr_count = in.Byte();
  const int tensors = in.Byte() % (kMaxTensors + 1);
  for (int i = 0; i < tensors; ++i) {
    TensorRecipe t;
    t.dtype = in.Byte();
    const int rank = in.Byte() % 4;
    for (int d = 0; d < rank; ++d) t.dims.push_back(in.U16() % 2048);
    r.tensors.push_back(std::move(t));
  }
  r.link_kind = in.Byte();
  r.type_kind = in.Byte();
  r.size_delta = static_cast<int8_t>(in.Byte());
  r.space_kind = in.Byte();
  r.layout_kind = in.Byte();
  r.written = in.Byte();
  r.fix = in.Byte() % 3;
  r.json = in.Rest();
  return r;
}

std::string EncodeRecipe(const Recipe& r) {
  std::string out(1, static_cast<char>(r.mode));
  if (r.mode != 0) return out + r.json;
  out.push_back(static_cast<char>(r.attr_kind));
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(static_cast<uint32_t>(r.attr_value) >> (8 * i)));
  out.push_back(static_cast<char>(r.attr_count));
  out.push_back(static_cast<char>(r.tensors.size()));
  for (const TensorRecipe& t : r.tensors) {
    out.push_back(static_cast<char>(t.dtype));
    out.push_back(static_cast<char>(t.dims.size()));
    for (uint16_t d : t.dims) Put16(&out, d);
  }
  for (uint8_t b : {r.link_kind, r.type_kind, static_cast<uint8_t>(r.size_delta), r.space_kind,
                    r.layout_kind, r.written, r.fix})
    out.push_back(static_cast<char>(b));
  return out + r.json;
}

Status BuildRankFile(const Recipe& r, File* file) {
  Hdf5DriverState state;
  state.file = file;
  {
    H5Handle fapl = Hdf5FileAccessOver(&state);
    H5Handle h5 =
        Handle(H5Fcreate(file->path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!h5.valid()) return Status::Internal("the fuzzer could not create its file");
    WriteAttribute(h5.get(), r);
    const Placed placed = WriteTensors(h5.get(), r);
    const Placed objects = r.fix ? WriteObjectData(h5.get(), r.json) : Placed();
    // Offsets are known once the datasets exist; checksums need their bytes on "disk".
    H5Fflush(h5.get(), H5F_SCOPE_GLOBAL);
    WriteManifest(h5.get(), r, FixJson(r, placed, objects, file));
  }
  return state.error;
}

}  // namespace rtft::fuzz
