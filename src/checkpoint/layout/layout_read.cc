// Reading a rank file's manifest through HDF5, on a file that may have been crafted: before any
// HDF5 read, the object is checked (a hard link to a dataset in this file, the class, size and
// dataspace of its type, its storage), and the read goes into a buffer of exactly the checked
// size, converted to a memory type rt-ft chose. HDF5 reads through the caller's File only
// (hdf5_driver.h), so external storage and external links, which would open other files by
// name, are refused.
#include <algorithm>
#include <cstring>

#include "checkpoint/layout/hdf5_driver.h"
#include "checkpoint/layout/hdf5_util.h"
#include "checkpoint/layout/layout.h"
#include "core/fault_point.h"

namespace rtft {
namespace {

// The 8 bytes every HDF5 file starts with (rt-ft files have no user block).
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

Status Damaged(const Hdf5DriverState& io, const std::string& what) {
  if (!io.error.ok()) return io.error.Annotate(what);
  return Hdf5Error(StatusCode::kDataLoss, what);
}

// A scalar dataspace: exactly one element.
bool IsScalar(hid_t space) {
  return space >= 0 && H5Sget_simple_extent_type(space) == H5S_SCALAR &&
         H5Sget_simple_extent_npoints(space) == 1;
}

Status CheckSignature(File* file, const std::string& path, uint64_t size) {
  char head[sizeof(kHdf5Signature)] = {};
  if (size >= sizeof(head)) RTFT_RETURN_IF_ERROR(file->Read({IoRequest{0, head, sizeof(head)}}));
  if (size < sizeof(head) || std::memcmp(head, kHdf5Signature, sizeof(head)) != 0)
    return Status::InvalidArgument(path + " is not an HDF5 file, so not an rt-ft checkpoint");
  return Status::Ok();
}

// The root attribute rtft_format_version: a scalar integer of at most 8 bytes, from 1 to
// kFormatVersion. Returns it.
StatusOr<int> CheckFormatVersion(hid_t file, const Hdf5DriverState& io, const std::string& path) {
  const htri_t exists = H5Aexists(file, kFormatVersionAttribute);
  if (exists < 0) return Damaged(io, path + " is damaged: HDF5 cannot read its root group");
  if (exists == 0)
    return Status::InvalidArgument(path + " is an HDF5 file but not an rt-ft checkpoint");
  H5Handle attr(H5Aopen(file, kFormatVersionAttribute, H5P_DEFAULT), H5Aclose);
  H5Handle type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID, H5Tclose);
  H5Handle space(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID, H5Sclose);
  if (!type.valid() || !space.valid()) return Damaged(io, "reading the format version of " + path);
  const size_t size = H5Tget_size(type.get());
  if (H5Tget_class(type.get()) != H5T_INTEGER || size == 0 || size > 8 || !IsScalar(space.get()))
    return Status::DataLoss(path + " is damaged: its format version is not one integer");
  int64_t version = 0;  // HDF5 converts the checked integer into exactly these 8 bytes
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &version) < 0)
    return Damaged(io, "reading the format version of " + path);
  if (version > kFormatVersion)
    return Status::Unimplemented(path + " has checkpoint format version " +
                                 std::to_string(version) + ", newer than this rt-ft reads (" +
                                 std::to_string(kFormatVersion) + "); upgrade rt-ft");
  if (version < 1)
    return Status::DataLoss(path + " is damaged: format version " + std::to_string(version));
  return static_cast<int>(version);
}

// /rtft_manifest must be a hard link: a soft or external link would lead elsewhere.
Status CheckManifestLink(hid_t file, const Hdf5DriverState& io, const std::string& path) {
  const htri_t exists = H5Lexists(file, kManifestDataset, H5P_DEFAULT);
  if (exists < 0) return Damaged(io, path + " is damaged: HDF5 cannot read its root group");
  if (exists == 0)
    return Status::DataLoss(path + " has no manifest: it was not completely written");
  H5L_info_t link;
  if (H5Lget_info(file, kManifestDataset, &link, H5P_DEFAULT) < 0)
    return Damaged(io, "reading the manifest of " + path);
  if (link.type != H5L_TYPE_HARD)
    return Status::DataLoss(path + " is damaged: its manifest is a link to somewhere else");
  return Status::Ok();
}

// The manifest dataset: a scalar, fixed-length string of at most kMaxManifestBytes (and no more
// than the file holds), stored in this file, contiguous or compact. Returns its size.
StatusOr<size_t> CheckManifestDataset(hid_t ds, const Hdf5DriverState& io, const std::string& path,
                                      uint64_t file_size) {
  const std::string damaged = path + " is damaged: its manifest ";
  H5Handle type(H5Dget_type(ds), H5Tclose);
  H5Handle space(H5Dget_space(ds), H5Sclose);
  H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!type.valid() || !space.valid() || !dcpl.valid())
    return Damaged(io, "reading the manifest of " + path);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
    return Status::DataLoss(damaged + "is not a fixed-length string");
  if (!IsScalar(space.get())) return Status::DataLoss(damaged + "is not a single string");
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || size > kMaxManifestBytes || size > file_size)
    return Status::DataLoss(damaged + "declares " + std::to_string(size) +
                            " bytes (the file holds " + std::to_string(file_size) +
                            ", a manifest at most " + std::to_string(kMaxManifestBytes) + ")");
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if ((layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) || H5Pget_external_count(dcpl.get()) != 0)
    return Status::DataLoss(damaged + "is not stored as rt-ft stores it (contiguous, in the file)");
  if (H5Dget_storage_size(ds) != size)
    return Status::DataLoss(damaged + "was never written, or not whole");
  return size;
}

StatusOr<std::string> ReadManifest(hid_t file, const Hdf5DriverState& io, const std::string& path,
                                   uint64_t file_size) {
  RTFT_RETURN_IF_ERROR(CheckManifestLink(file, io, path));
  H5Handle ds(H5Dopen2(file, kManifestDataset, H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) return Damaged(io, path + " is damaged: its manifest is not a dataset");
  RTFT_ASSIGN_OR_RETURN(size_t size, CheckManifestDataset(ds.get(), io, path, file_size));
  H5Handle file_type(H5Dget_type(ds.get()), H5Tclose);
  H5Handle memory_type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!file_type.valid() || !memory_type.valid() || H5Tset_size(memory_type.get(), size) < 0 ||
      H5Tset_strpad(memory_type.get(), H5T_STR_NULLPAD) < 0 ||
      H5Tset_cset(memory_type.get(), H5Tget_cset(file_type.get())) < 0)
    return Damaged(io, "reading the manifest of " + path);
  std::string json(size, '\0');
  if (H5Dread(ds.get(), memory_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, json.data()) < 0)
    return Damaged(io, "reading the manifest of " + path);
  json.resize(std::find(json.begin(), json.end(), '\0') - json.begin());
  return json;
}

}  // namespace

StatusOr<std::string> ReadFileManifestJson(File* file, int* format_version) {
  // A named phase for tests (core/fault_point.h): a reader that dies or hangs here.
  FaultPoint("ckpt.read_manifest");
  SilenceHdf5Errors();
  const std::string& path = file->path();
  RTFT_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  RTFT_RETURN_IF_ERROR(CheckSignature(file, path, size));
  Hdf5DriverState state;  // outlives every HDF5 id below
  state.file = file;
  H5Handle fapl = Hdf5FileAccessOver(&state);
  H5Handle h5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!h5.valid()) return Damaged(state, path + " is damaged or truncated: HDF5 cannot open it");
  RTFT_ASSIGN_OR_RETURN(int version, CheckFormatVersion(h5.get(), state, path));
  if (format_version) *format_version = version;
  return ReadManifest(h5.get(), state, path, size);
}

}  // namespace rtft
