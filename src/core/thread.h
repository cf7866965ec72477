// The one background-thread type of rt-ft and the exception guard that every background loop runs
// under (capture, flush, replication, heartbeats, listeners, the runtime's event thread): an
// exception that escaped a thread would call std::terminate and take the whole rank down; here it
// becomes a Status, logged once, that the thread's owner reports from its next call. Also the
// registry of threads that must end before the process exits though no owner waits for them.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>

#include "rtft/status.h"

namespace rtft {

namespace internal {
// The kInternal status of an exception that escaped `what` (`detail`: its what(), or null for an
// exception of an unknown type), logged once. Never throws.
Status Escaped(const char* what, const char* detail) noexcept;
}  // namespace internal

// Runs `body` (returning void or Status): its Status, Ok when it returns void, kInternal naming
// `what` and the exception when one escapes (logged once). Never throws, even when the message
// cannot be built for want of memory.
template <typename Fn>
Status RunGuarded(const char* what, Fn&& body) noexcept {
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      return Status::Ok();
    } else {
      return body();
    }
  } catch (const std::exception& e) {
    return internal::Escaped(what, e.what());
  } catch (...) {
    return internal::Escaped(what, nullptr);
  }
}
template <typename Fn>
Status RunGuarded(const std::string& what, Fn&& body) noexcept {
  return RunGuarded(what.c_str(), std::forward<Fn>(body));
}

// A named thread (pthread_setname_np: the first 15 characters show in top, gdb and perf) whose
// body runs under RunGuarded. Joined by Join() or the destructor; never detached.
class Thread {
 public:
  Thread() = default;
  // Starts `body`; kResourceExhausted when the system has no thread to give.
  static StatusOr<Thread> Start(std::string name, std::function<void()> body);
  Thread(Thread&& other) noexcept = default;
  // Joins a running thread first.
  Thread& operator=(Thread&& other) noexcept;
  ~Thread();

  // Waits for the body to return; a no-op when the thread is not running or is the caller.
  void Join();
  bool running() const { return thread_.joinable(); }
  const std::string& name() const { return name_; }
  // Whether the body has returned (Join() will not block).
  bool finished() const;
  // After Join(): the error of an exception that escaped the body, else Ok.
  Status status() const;

 private:
  struct Shared;
  std::string name_;
  std::thread thread_;
  std::shared_ptr<Shared> shared_;
};

// Threads that must end before the process exits, though no owner waits for them (an NCCL abort
// that waits for a dead peer): kept here, the finished ones joined at each Linger().
void Linger(Thread thread);
// Joins every lingering thread. rtft::Runtime's destructor and rtft::Shutdown() call it, before
// the exit handlers of HDF5 and CUDA run (a thread still in NCCL or CUDA then would crash them).
void DrainLingering();

}  // namespace rtft
