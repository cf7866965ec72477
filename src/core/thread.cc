#include "core/thread.h"

#include <pthread.h>

#include <atomic>
#include <list>
#include <mutex>
#include <system_error>

#include "core/logging.h"

namespace rtft {
namespace internal {

Status Escaped(const char* what, const char* detail) noexcept {
  // Out of memory, even the message may not be built: the code alone still says it.
  try {
    Status error = Status::Internal(std::string(what) + " ended by " +
                                    (detail ? std::string("an exception: ") + detail
                                            : std::string("an exception of an unknown type")));
    RTFT_LOG(kError, kLogCore) << error;
    return error;
  } catch (...) {
    return Status(StatusCode::kInternal, std::string());
  }
}

}  // namespace internal

struct Thread::Shared {
  std::atomic<bool> finished{false};
  Status status;  // written by the thread before `finished`, read after Join()
};

StatusOr<Thread> Thread::Start(std::string name, std::function<void()> body) {
  Thread t;
  t.name_ = std::move(name);
  t.shared_ = std::make_shared<Shared>();
  try {
    t.thread_ = std::thread([shared = t.shared_, name = t.name_, body = std::move(body)] {
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      shared->status = RunGuarded("thread '" + name + "'", body);
      shared->finished = true;
    });
  } catch (const std::system_error& e) {
    return Status::ResourceExhausted("starting thread '" + t.name_ + "': " + e.what());
  }
  return t;
}

Thread& Thread::operator=(Thread&& other) noexcept {
  if (this != &other) {
    Join();
    name_ = std::move(other.name_);
    thread_ = std::move(other.thread_);
    shared_ = std::move(other.shared_);
  }
  return *this;
}

Thread::~Thread() { Join(); }

void Thread::Join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool Thread::finished() const { return !shared_ || shared_->finished.load(); }

Status Thread::status() const {
  if (!shared_ || !shared_->finished) return Status::Ok();
  return shared_->status;
}

namespace {

struct Lingering {
  std::mutex mu;
  std::list<Thread> threads;
};

// Never destroyed: a thread may still be lingering while static destructors run.
Lingering& TheLingering() {
  static Lingering* l = new Lingering;
  return *l;
}

}  // namespace

void Linger(Thread thread) {
  Lingering& l = TheLingering();
  std::list<Thread> done;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    for (auto it = l.threads.begin(); it != l.threads.end();) {
      auto next = std::next(it);
      if (it->finished()) done.splice(done.end(), l.threads, it);
      it = next;
    }
    l.threads.push_back(std::move(thread));
  }
  // `done` joins as it goes out of scope, outside the lock.
}

void DrainLingering() {
  Lingering& l = TheLingering();
  std::list<Thread> all;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    all.swap(l.threads);
  }
  for (Thread& t : all) t.Join();
}

}  // namespace rtft
