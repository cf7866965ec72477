#include "checkpoint/layout/hdf5_util.h"

#include <mutex>

#include "checkpoint/layout/layout.h"

namespace rtft {

void SilenceHdf5Errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

Status Hdf5Error(StatusCode code, const std::string& what) {
  std::string detail;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (err->desc && *err->desc) {
          if (!out->empty()) *out += "; ";
          *out += err->desc;
        }
        return n >= 2 ? 1 : 0;  // the outermost few messages say enough
      },
      &detail);
  H5Eclear2(H5E_DEFAULT);
  return Status(code, detail.empty() ? what : what + " (" + detail + ")");
}

namespace {
// IEEE half: sign 15, exponent bits 10..14 (bias 15), mantissa 0..9.
// bfloat16: sign 15, exponent bits 7..14 (bias 127), mantissa 0..6.
H5Handle Float16Type(size_t epos, size_t esize, size_t msize, size_t ebias) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, epos, esize, 0, msize);
  H5Tset_precision(t, 16);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, ebias);
  return H5Handle(t, H5Tclose);
}
}  // namespace

H5Handle Hdf5FileType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return H5Handle(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case DType::kFloat16:
      return Float16Type(10, 5, 10, 15);
    case DType::kBFloat16:
      return Float16Type(7, 8, 7, 127);
    case DType::kInt8:
      return H5Handle(H5Tcopy(H5T_STD_I8LE), H5Tclose);
    case DType::kInt32:
      return H5Handle(H5Tcopy(H5T_STD_I32LE), H5Tclose);
    case DType::kInt64:
      return H5Handle(H5Tcopy(H5T_STD_I64LE), H5Tclose);
    case DType::kUInt8:
      return H5Handle(H5Tcopy(H5T_STD_U8LE), H5Tclose);
    case DType::kFloat64:
      return H5Handle(H5Tcopy(H5T_IEEE_F64LE), H5Tclose);
  }
  return H5Handle();
}

H5Handle Hdf5FileAccess() {
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_alignment(fapl.get(), kDatasetAlignment, kDatasetAlignment);
  // Metadata in large blocks, so that object headers do not fall between the datasets' bytes:
  // adjacent datasets stay adjacent in the file and the engine merges their writes.
  H5Pset_meta_block_size(fapl.get(), 256 << 10);
  return fapl;
}

}  // namespace rtft
