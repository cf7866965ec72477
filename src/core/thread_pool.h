// A fixed-size pool of worker threads. Tasks never throw out of the pool: a task that throws is
// a bug and aborts. Used for host-side capture, checksum verification and CPU work.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/thread.h"

namespace rtft {

class ThreadPool {
 public:
  // `name`: what the workers are called (core/thread.h).
  explicit ThreadPool(int threads, const std::string& name = "rtft-pool");
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task);
  // Runs fn(i) for i in [0, n) on the pool and the calling thread; returns when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);
  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<Thread> workers_;
};

}  // namespace rtft
