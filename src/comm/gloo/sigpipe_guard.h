// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer is gone, and
// SIGPIPE's default action ends the process: a dead peer would kill its survivors. SIGPIPE from a
// write goes to the writing thread, so rt-ft blocks it on every thread that makes Gloo write: the
// caller's, for the length of a call (a SIGPIPE raised meanwhile is consumed, the write itself
// fails with EPIPE and Gloo reports the broken pair), and Gloo's event loop, which inherits the
// mask of the thread that creates the device. The process's own SIGPIPE handling is untouched.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <time.h>

namespace rtft::comm::gloo_backend {

class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        (void)sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

}  // namespace rtft::comm::gloo_backend
