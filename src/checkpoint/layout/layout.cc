#include "checkpoint/layout/layout.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "checkpoint/layout/hdf5_util.h"
#include "core/checksum.h"

namespace rtft {
namespace {

// HDF5 does not say why a create failed; the operating system does.
Status CreateFailure(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  if (fd < 0) return Status::FromErrno(errno, "creating " + path);
  ::close(fd);
  return Hdf5Error(StatusCode::kIoError, "HDF5 could not create " + path);
}

H5Handle LinkCreateProps() {
  H5Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return lcpl;
}

H5Handle Dataspace(const std::vector<int64_t>& shape) {
  if (shape.empty()) return H5Handle(H5Screate(H5S_SCALAR), H5Sclose);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
}

Status WriteInt64Attribute(hid_t obj, const char* name, const std::vector<int64_t>& values) {
  hsize_t n = values.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose);
  if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()) < 0)
    return Hdf5Error(StatusCode::kIoError, std::string("writing attribute ") + name);
  return Status::Ok();
}

Status WriteFormatVersion(hid_t file) {
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(file, kFormatVersionAttribute, H5T_STD_I32LE, space.get(), H5P_DEFAULT,
                           H5P_DEFAULT),
                H5Aclose);
  int version = kFormatVersion;
  if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT, &version) < 0)
    return Hdf5Error(StatusCode::kIoError, "writing the format version");
  return Status::Ok();
}

// Raw bytes as a 1-D uint8 dataset; returns its offset (0 when empty).
StatusOr<uint64_t> WriteBytesDataset(hid_t file, const std::string& path, const std::string& bytes,
                                     hid_t lcpl) {
  H5Handle space = Dataspace({static_cast<int64_t>(bytes.size())});
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
  H5Handle ds(
      H5Dcreate2(file, path.c_str(), H5T_STD_U8LE, space.get(), lcpl, dcpl.get(), H5P_DEFAULT),
      H5Dclose);
  if (!ds.valid()) return Hdf5Error(StatusCode::kIoError, "creating dataset " + path);
  if (bytes.empty()) return uint64_t{0};
  if (H5Dwrite(ds.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    return Hdf5Error(StatusCode::kIoError, "writing dataset " + path);
  haddr_t offset = H5Dget_offset(ds.get());
  if (offset == HADDR_UNDEF) return Status::Internal("dataset " + path + " has no file offset");
  return static_cast<uint64_t>(offset);
}

Status WriteObjects(hid_t file, const std::vector<ObjectBlob>& objects,
                    std::vector<ObjectEntry>* entries) {
  H5Handle lcpl = LinkCreateProps();
  for (const ObjectBlob& o : objects) {
    ObjectEntry e;
    e.name = o.name;
    e.bytes = o.bytes.size();
    e.xxh3 = Xxh3(o.bytes.data(), o.bytes.size());
    RTFT_ASSIGN_OR_RETURN(e.offset, WriteBytesDataset(file, e.dataset(), o.bytes, lcpl.get()));
    entries->push_back(std::move(e));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<uint64_t>> CreateSkeleton(const std::string& path,
                                               const std::vector<DatasetSpec>& tensors,
                                               const std::vector<ObjectBlob>& objects,
                                               std::vector<ObjectEntry>* object_entries) {
  SilenceHdf5Errors();
  H5Handle fapl = Hdf5FileAccess();
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!file.valid()) return CreateFailure(path);
  RTFT_RETURN_IF_ERROR(WriteFormatVersion(file.get()));

  H5Handle lcpl = LinkCreateProps();
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);  // offsets exist before any data moves
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);    // the engine writes every byte itself

  std::vector<uint64_t> offsets;
  offsets.reserve(tensors.size());
  for (const DatasetSpec& t : tensors) {
    const std::string name = std::string(kTensorGroup) + "/" + t.name;
    H5Handle type = Hdf5FileType(t.dtype);
    H5Handle space = Dataspace(t.shape);
    H5Handle ds(H5Dcreate2(file.get(), name.c_str(), type.get(), space.get(), lcpl.get(),
                           dcpl.get(), H5P_DEFAULT),
                H5Dclose);
    if (!ds.valid())
      return Hdf5Error(StatusCode::kIoError, "creating dataset " + name + " in " + path);
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    haddr_t offset = H5Dget_offset(ds.get());
    if (elements == 0) {
      offsets.push_back(0);
    } else if (offset == HADDR_UNDEF) {
      return Status::Internal("HDF5 gave dataset " + name + " no file offset");
    } else {
      offsets.push_back(static_cast<uint64_t>(offset));
    }
    if (t.shard.sharded()) {
      RTFT_RETURN_IF_ERROR(WriteInt64Attribute(ds.get(), "global_shape", t.shard.global_shape));
      RTFT_RETURN_IF_ERROR(WriteInt64Attribute(ds.get(), "shard_offset", t.shard.offset));
    }
  }
  std::vector<ObjectEntry> entries;
  RTFT_RETURN_IF_ERROR(WriteObjects(file.get(), objects, &entries));
  if (object_entries) *object_entries = std::move(entries);
  // Closing flushes the metadata and extends the file to cover every allocated dataset.
  if (file.Close() < 0) return Hdf5Error(StatusCode::kIoError, "closing " + path);
  return offsets;
}

Status FinalizeFile(const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest) {
  SilenceHdf5Errors();
  H5Handle fapl = Hdf5FileAccess();
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
  if (!file.valid()) return Hdf5Error(StatusCode::kIoError, "reopening " + path);
  RTFT_RETURN_IF_ERROR(WriteObjects(file.get(), objects, &manifest->objects));

  // The manifest goes last: a file without it was not finished.
  const std::string json = manifest->ToJson();
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), json.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle ds(H5Dcreate2(file.get(), kManifestDataset, type.get(), space.get(), H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  if (!ds.valid() || H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, json.data()) < 0)
    return Hdf5Error(StatusCode::kIoError, "writing the manifest of " + path);
  ds.Reset();
  if (file.Close() < 0) return Hdf5Error(StatusCode::kIoError, "closing " + path);
  return Status::Ok();
}

StatusOr<std::string> ReadFileManifestJson(const std::string& path) {
  SilenceHdf5Errors();
  if (::access(path.c_str(), R_OK) != 0) return Status::FromErrno(errno, "opening " + path);
  if (H5Fis_hdf5(path.c_str()) <= 0)
    return Status::InvalidArgument(path + " is not an HDF5 file, so not an rt-ft checkpoint");
  H5Handle fapl = Hdf5FileAccess();
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.valid())
    return Hdf5Error(StatusCode::kDataLoss, path + " is damaged or truncated: HDF5 cannot open it");
  if (H5Aexists(file.get(), kFormatVersionAttribute) <= 0)
    return Status::InvalidArgument(path + " is an HDF5 file but not an rt-ft checkpoint");
  {
    H5Handle attr(H5Aopen(file.get(), kFormatVersionAttribute, H5P_DEFAULT), H5Aclose);
    int version = 0;
    if (!attr.valid() || H5Aread(attr.get(), H5T_NATIVE_INT, &version) < 0)
      return Hdf5Error(StatusCode::kDataLoss, "reading the format version of " + path);
    if (version > kFormatVersion)
      return Status::Unimplemented(path + " has checkpoint format version " +
                                   std::to_string(version) + ", newer than this rt-ft reads (" +
                                   std::to_string(kFormatVersion) + "); upgrade rt-ft");
  }
  if (H5Lexists(file.get(), kManifestDataset, H5P_DEFAULT) <= 0)
    return Status::DataLoss(path + " has no manifest: it was not completely written");
  H5Handle ds(H5Dopen2(file.get(), kManifestDataset, H5P_DEFAULT), H5Dclose);
  H5Handle type(ds.valid() ? H5Dget_type(ds.get()) : H5I_INVALID_HID, H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING)
    return Hdf5Error(StatusCode::kDataLoss, "the manifest of " + path + " is damaged");
  std::string json(H5Tget_size(type.get()), '\0');
  if (H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, json.data()) < 0)
    return Hdf5Error(StatusCode::kDataLoss, "reading the manifest of " + path);
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

StatusOr<FileManifest> ReadFileManifest(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(std::string json, ReadFileManifestJson(path));
  auto m = FileManifest::FromJson(json);
  if (!m.ok()) return m.status().Annotate(path);
  return m;
}

}  // namespace rtft
