#include "checkpoint/layout/layout.h"

#include "checkpoint/layout/hdf5_driver.h"
#include "checkpoint/layout/hdf5_util.h"
#include "core/checksum.h"

namespace rtft {
namespace {

// The error of an HDF5 step: the I/O error behind it when the driver saw one (HDF5 does not say
// why), else HDF5's own.
Status StepError(const Hdf5DriverState& io, const std::string& what) {
  if (!io.error.ok()) return io.error.Annotate(what);
  return Hdf5Error(StatusCode::kIoError, what);
}

// OK when the step succeeded and no write under it failed.
Status Step(const Hdf5DriverState& io, bool ok, const std::string& what) {
  if (ok && io.error.ok()) return Status::Ok();
  return StepError(io, what);
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

Status WriteFormatVersion(hid_t file, int version) {
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(file, kFormatVersionAttribute, H5T_STD_I32LE, space.get(), H5P_DEFAULT,
                           H5P_DEFAULT),
                H5Aclose);
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

StatusOr<std::vector<uint64_t>> CreateDatasets(hid_t file, const Hdf5DriverState& io,
                                               const std::string& path,
                                               const std::vector<DatasetSpec>& tensors) {
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
    H5Handle ds(H5Dcreate2(file, name.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(),
                           H5P_DEFAULT),
                H5Dclose);
    RTFT_RETURN_IF_ERROR(Step(io, ds.valid(), "creating dataset " + name + " in " + path));
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
    RTFT_RETURN_IF_ERROR(Step(io, ds.Close() >= 0, "closing dataset " + name + " in " + path));
  }
  return offsets;
}

Status WriteManifest(hid_t file, const Hdf5DriverState& io, const std::string& path,
                     const std::string& json) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), json.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle ds(H5Dcreate2(file, kManifestDataset, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT),
              H5Dclose);
  RTFT_RETURN_IF_ERROR(Step(io, ds.valid(), "creating the manifest of " + path));
  RTFT_RETURN_IF_ERROR(
      Step(io, H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, json.data()) >= 0,
           "writing the manifest of " + path));
  // Closing the dataset flushes HDF5's buffer of its bytes: that write can fail too.
  return Step(io, ds.Close() >= 0, "writing the manifest of " + path);
}

StatusOr<std::unique_ptr<IoBackend>> PosixBackend() {
  IoBackendOptions options;
  options.kind = "posix";
  return CreateIoBackend(options);
}

}  // namespace

StatusOr<std::vector<uint64_t>> CreateSkeleton(IoBackend* io, const std::string& path,
                                               const std::vector<DatasetSpec>& tensors,
                                               const std::vector<ObjectBlob>& objects,
                                               std::vector<ObjectEntry>* object_entries) {
  SilenceHdf5Errors();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> out, io->Open(path, {OpenMode::kCreate, false}));
  Hdf5DriverState state;  // outlives every HDF5 id below
  state.file = out.get();
  std::vector<uint64_t> offsets;
  {
    H5Handle fapl = Hdf5FileAccessOver(&state);
    H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    RTFT_RETURN_IF_ERROR(Step(state, file.valid(), "creating " + path));
    std::vector<DType> dtypes;
    for (const DatasetSpec& t : tensors) dtypes.push_back(t.dtype);
    RTFT_RETURN_IF_ERROR(WriteFormatVersion(file.get(), FormatVersionFor(dtypes)));
    RTFT_ASSIGN_OR_RETURN(offsets, CreateDatasets(file.get(), state, path, tensors));
    std::vector<ObjectEntry> entries;
    RTFT_RETURN_IF_ERROR(WriteObjects(file.get(), objects, &entries));
    RTFT_RETURN_IF_ERROR(Step(state, true, "writing the objects of " + path));
    if (object_entries) *object_entries = std::move(entries);
    // Closing flushes the metadata and extends the file to cover every allocated dataset.
    RTFT_RETURN_IF_ERROR(Step(state, file.Close() >= 0, "closing " + path));
  }
  RTFT_RETURN_IF_ERROR(out->Close());
  return offsets;
}

Status FinalizeFile(IoBackend* io, const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest) {
  SilenceHdf5Errors();
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> out, io->Open(path, {OpenMode::kReadWrite, false}));
  Hdf5DriverState state;  // outlives every HDF5 id below
  state.file = out.get();
  // The version CreateSkeleton wrote in the root attribute, from the same dtypes.
  std::vector<DType> dtypes;
  for (const TensorEntry& t : manifest->tensors) dtypes.push_back(t.dtype);
  manifest->format_version = FormatVersionFor(dtypes);
  std::string json;
  {
    H5Handle fapl = Hdf5FileAccessOver(&state);
    H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
    RTFT_RETURN_IF_ERROR(Step(state, file.valid(), "reopening " + path));
    RTFT_RETURN_IF_ERROR(WriteObjects(file.get(), objects, &manifest->objects));
    RTFT_RETURN_IF_ERROR(Step(state, true, "writing the objects of " + path));
    // The manifest goes last: a file without it was not finished.
    json = manifest->ToJson();
    RTFT_RETURN_IF_ERROR(WriteManifest(file.get(), state, path, json));
    RTFT_RETURN_IF_ERROR(Step(state, file.Close() >= 0, "closing " + path));
  }
  // What a reader will see: a write the disk dropped without an error, or one that the page
  // cache could not hold, shows up here rather than after the rename.
  StatusOr<std::string> back = ReadFileManifestJson(out.get());
  if (!back.ok()) return back.status().Annotate("reading back the manifest just written");
  if (*back != json)
    return Status::IoError("the manifest read back from " + path +
                           " differs from the one written (a write was lost)");
  return out->Close();
}

StatusOr<std::vector<uint64_t>> CreateSkeleton(const std::string& path,
                                               const std::vector<DatasetSpec>& tensors,
                                               const std::vector<ObjectBlob>& objects,
                                               std::vector<ObjectEntry>* object_entries) {
  RTFT_ASSIGN_OR_RETURN(auto io, PosixBackend());
  return CreateSkeleton(io.get(), path, tensors, objects, object_entries);
}

Status FinalizeFile(const std::string& path, const std::vector<ObjectBlob>& objects,
                    FileManifest* manifest) {
  RTFT_ASSIGN_OR_RETURN(auto io, PosixBackend());
  return FinalizeFile(io.get(), path, objects, manifest);
}

StatusOr<std::string> ReadFileManifestJson(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(auto io, PosixBackend());
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<File> file, io->Open(path, {OpenMode::kReadOnly, false}));
  return ReadFileManifestJson(file.get());
}

StatusOr<FileManifest> ReadFileManifest(const std::string& path) {
  RTFT_ASSIGN_OR_RETURN(std::string json, ReadFileManifestJson(path));
  auto m = FileManifest::FromJson(json);
  if (!m.ok()) return m.status().Annotate(path);
  return m;
}

}  // namespace rtft
