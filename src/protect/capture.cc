#include "protect/capture.h"

#include <future>

namespace rtft::protect {

StatusOr<std::unique_ptr<Capturer>> Capturer::Start(Snapshot* l1) {
  std::unique_ptr<Capturer> c(new Capturer(l1));
  RTFT_ASSIGN_OR_RETURN(c->thread_, Thread::Start("rtft-l1-capture", [p = c.get()] { p->Run(); }));
  return c;
}

Capturer::~Capturer() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.Join();
}

Status Capturer::Begin(Job job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (busy_) return Status::Internal("an L1 capture was begun before the last one was waited for");
  job_ = std::move(job);
  busy_ = true;
  copied_ = false;
  status_ = Status::Ok();
  cv_.notify_all();
  return Status::Ok();
}

Status Capturer::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  return status_;
}

Status Capturer::WaitCopied() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_ || copied_; });
  return busy_ ? Status::Ok() : status_;
}

void Capturer::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || job_.has_value(); });
      if (stop_) return;
      job = std::move(*job_);
      job_.reset();
    }
    std::promise<Status> sealed;
    Status handoff;
    Status s = RunGuarded("the L1 capture", [&] {
      return l1_->Capture(job.step, job.epoch, job.rank, job.world, job.objects, job.stream, [&] {
        // The replicator has the step before anyone learns that the state was copied: a wait
        // for its replica after the fence waits for this one.
        if (job.copied)
          handoff = RunGuarded("the L1 capture's hand-off",
                               [&] { job.copied(job.step, sealed.get_future().share()); });
        std::lock_guard<std::mutex> lock(mu_);
        copied_ = true;
        cv_.notify_all();
      });
    });
    // A step the replicator was not given would not be waited for: the capture failed.
    if (s.ok()) s = handoff;
    sealed.set_value(s);
    std::lock_guard<std::mutex> lock(mu_);
    status_ = s;
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace rtft::protect
