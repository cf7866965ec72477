#include "checkpoint/layout/hdf5_driver.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <mutex>
#include <new>

namespace rtft {
namespace {

// What H5Pset_driver copies into the property list: HDF5 copies it by value.
struct DriverInfo {
  Hdf5DriverState* state;
};

// HDF5's view of one open file. `base` must come first: HDF5 casts between the two.
struct DriverFile {
  H5FD_t base;
  Hdf5DriverState* state;
  haddr_t eoa;  // end of the space HDF5 has allocated
  haddr_t eof;  // end of the bytes in the file
};

DriverFile* Cast(H5FD_t* f) { return reinterpret_cast<DriverFile*>(f); }
const DriverFile* Cast(const H5FD_t* f) { return reinterpret_cast<const DriverFile*>(f); }

// Runs a callback's body; HDF5 is C, so nothing may be thrown through it.
template <typename Fn>
herr_t Guard(Hdf5DriverState* state, Fn&& fn) noexcept {
  try {
    Status s = fn();
    if (s.ok()) return 0;
    if (state->error.ok()) state->error = s;
  } catch (const std::exception& e) {
    if (state->error.ok())
      state->error =
          Status::Internal(std::string("uncaught exception in the HDF5 driver: ") + e.what());
  } catch (...) {
    if (state->error.ok()) state->error = Status::Internal("uncaught exception in the HDF5 driver");
  }
  return -1;
}

H5FD_t* Open(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  const auto* info = static_cast<const DriverInfo*>(H5Pget_driver_info(fapl));
  if (info == nullptr || info->state == nullptr || info->state->file == nullptr) return nullptr;
  Hdf5DriverState* state = info->state;
  auto* f = new (std::nothrow) DriverFile{};
  if (f == nullptr) return nullptr;
  f->state = state;
  herr_t r = Guard(state, [&]() -> Status {
    if (flags & H5F_ACC_TRUNC) RTFT_RETURN_IF_ERROR(state->file->Truncate(0));
    RTFT_ASSIGN_OR_RETURN(uint64_t size, state->file->Size());
    f->eof = size;
    return Status::Ok();
  });
  if (r < 0) {
    delete f;
    return nullptr;
  }
  return &f->base;
}

// The File belongs to the caller (layout.cc): closing HDF5's view of it closes nothing.
herr_t Close(H5FD_t* f) {
  delete Cast(f);
  return 0;
}

int Compare(const H5FD_t* a, const H5FD_t* b) {
  const File* fa = Cast(a)->state->file;
  const File* fb = Cast(b)->state->file;
  return fa < fb ? -1 : (fa > fb ? 1 : 0);
}

// What the sec2 driver allows HDF5 to do above it.
herr_t Query(const H5FD_t*, unsigned long* flags) {
  *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
           H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t GetEoa(const H5FD_t* f, H5FD_mem_t) { return Cast(f)->eoa; }

herr_t SetEoa(H5FD_t* f, H5FD_mem_t, haddr_t addr) {
  Cast(f)->eoa = addr;
  return 0;
}

haddr_t GetEof(const H5FD_t* f, H5FD_mem_t) { return Cast(f)->eof; }

herr_t GetHandle(H5FD_t* f, hid_t, void** handle) {
  *handle = Cast(f)->state->file;
  return 0;
}

// Bytes past the end of the file read as zeros, as with the sec2 driver (HDF5 reads a little
// past the end of a small file while it looks for the superblock).
herr_t Read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  DriverFile* f = Cast(file);
  return Guard(f->state, [&]() -> Status {
    if (addr == HADDR_UNDEF || size > std::numeric_limits<haddr_t>::max() - addr)
      return Status::DataLoss("HDF5 read past the largest file address");
    const uint64_t stored = addr < f->eof ? std::min<uint64_t>(size, f->eof - addr) : 0;
    if (stored > 0)
      RTFT_RETURN_IF_ERROR(
          f->state->file->Read({IoRequest{addr, buf, static_cast<size_t>(stored)}}));
    std::memset(static_cast<char*>(buf) + stored, 0, size - stored);
    return Status::Ok();
  });
}

herr_t Write(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, const void* buf) {
  DriverFile* f = Cast(file);
  (void)Guard(f->state, [&]() -> Status {
    if (!f->state->error.ok()) return Status::Ok();  // the file is lost already
    if (addr == HADDR_UNDEF || size > std::numeric_limits<haddr_t>::max() - addr)
      return Status::Internal("HDF5 wrote past the largest file address");
    // IoRequest's buffer is non-const because reads share the type; a write only reads it.
    RTFT_RETURN_IF_ERROR(f->state->file->Write({IoRequest{addr, const_cast<void*>(buf), size}}));
    f->eof = std::max<haddr_t>(f->eof, addr + size);
    return Status::Ok();
  });
  return 0;  // see Hdf5DriverState::error
}

// At close HDF5 sets the file's size to what it allocated: early-allocated datasets that the
// engine fills itself must lie inside the file.
herr_t Truncate(H5FD_t* file, hid_t, hbool_t) {
  DriverFile* f = Cast(file);
  (void)Guard(f->state, [&]() -> Status {
    if (!f->state->error.ok() || f->eoa == f->eof) return Status::Ok();
    RTFT_RETURN_IF_ERROR(f->state->file->Truncate(f->eoa));
    f->eof = f->eoa;
    return Status::Ok();
  });
  return 0;  // see Hdf5DriverState::error
}

// Durability is the caller's: the engine fsyncs the file itself before renaming it.
herr_t Flush(H5FD_t*, hid_t, hbool_t) { return 0; }

H5FD_class_t MakeClass() {
  H5FD_class_t c;
  std::memset(&c, 0, sizeof(c));
  c.name = "rtft_io";
  c.maxaddr = static_cast<haddr_t>(std::numeric_limits<int64_t>::max());
  c.fc_degree = H5F_CLOSE_WEAK;
  c.fapl_size = sizeof(DriverInfo);
  c.open = Open;
  c.close = Close;
  c.cmp = Compare;
  c.query = Query;
  c.get_eoa = GetEoa;
  c.set_eoa = SetEoa;
  c.get_eof = GetEof;
  c.get_handle = GetHandle;
  c.read = Read;
  c.write = Write;
  c.flush = Flush;
  c.truncate = Truncate;
  const H5FD_mem_t map[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;  // as the sec2 driver
  std::copy(std::begin(map), std::end(map), c.fl_map);
  return c;
}

// The driver's id; registered again should the HDF5 library have been closed and reopened.
hid_t DriverId() {
  static const H5FD_class_t kClass = MakeClass();
  static std::mutex mu;
  static hid_t id = H5I_INVALID_HID;
  std::lock_guard<std::mutex> lock(mu);
  if (id < 0 || H5Iis_valid(id) <= 0) id = H5FDregister(&kClass);
  return id;
}

}  // namespace

H5Handle Hdf5FileAccessOver(Hdf5DriverState* state) {
  H5Handle fapl = Hdf5FileAccess();
  const DriverInfo info{state};
  if (!fapl.valid() || H5Pset_driver(fapl.get(), DriverId(), &info) < 0) return H5Handle();
  return fapl;
}

}  // namespace rtft
