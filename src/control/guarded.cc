#include "control/guarded.h"

#include <exception>

#include "core/logging.h"

namespace rtft::control {

Status RunGuarded(const std::string& what, const std::function<void()>& body) noexcept {
  std::string detail = "an exception of an unknown type";
  try {
    body();
    return Status::Ok();
  } catch (const std::exception& e) {
    try {
      detail = std::string("an exception: ") + e.what();
    } catch (...) {  // no memory for the text: the unknown-type wording stays
    }
  } catch (...) {
  }
  // Out of memory, even the message cannot be built: the code alone still says it.
  try {
    Status error = Status::Internal(what + " ended by " + detail);
    RTFT_LOG(kError, kLogCtrl) << error;
    return error;
  } catch (...) {
    return Status(StatusCode::kInternal, std::string());
  }
}

}  // namespace rtft::control
