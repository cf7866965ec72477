#include "core/thread_pool.h"

#include <atomic>
#include <memory>

#include "core/check.h"

namespace rtft {

ThreadPool::ThreadPool(int threads, const std::string& name) {
  RTFT_CHECK(threads > 0);
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    auto worker = Thread::Start(name, [this] { Loop(); });
    // Fewer workers than asked is slower, not wrong; none at all is a pool that never runs.
    if (!worker.ok()) {
      RTFT_CHECK_MSG(!workers_.empty(), worker.status().ToString().c_str());
      break;
    }
    workers_.push_back(std::move(*worker));
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.Join();
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RTFT_CHECK(!stop_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_ and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    // A task that throws is a bug: the process ends, saying so, rather than losing a worker.
    const Status s = RunGuarded("a thread-pool task", task);
    RTFT_CHECK_MSG(s.ok(), s.ToString().c_str());
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  // Helpers may still be leaving `body` after the caller has returned, so everything they touch
  // lives in shared state, and `fn` is only called for indices claimed before `done` reaches n.
  struct Shared {
    std::atomic<size_t> next{0};
    size_t done = 0;
    std::mutex m;
    std::condition_variable finished;
    const std::function<void(size_t)>* fn;
    size_t n;
  };
  auto shared = std::make_shared<Shared>();
  shared->fn = &fn;
  shared->n = n;
  auto body = [shared] {
    size_t i;
    size_t mine = 0;
    while ((i = shared->next.fetch_add(1)) < shared->n) {
      (*shared->fn)(i);
      ++mine;
    }
    if (mine == 0) return;
    std::lock_guard<std::mutex> lock(shared->m);
    shared->done += mine;
    if (shared->done == shared->n) shared->finished.notify_all();
  };
  size_t helpers = std::min(n - 1, workers_.size());
  for (size_t h = 0; h < helpers; ++h) Submit(body);
  body();
  std::unique_lock<std::mutex> lock(shared->m);
  shared->finished.wait(lock, [&] { return shared->done == n; });
}

}  // namespace rtft
