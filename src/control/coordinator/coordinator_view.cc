// What other threads see of the coordinator, under its mutex.
#include "control/coordinator/coordinator_view.h"

#include "control/wire/messages.h"

namespace rtft::control {

Membership CoordinatorView::membership() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

CoordinatorStats CoordinatorView::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status CoordinatorView::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool CoordinatorView::primary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.primary;
}

bool CoordinatorView::fenced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fenced_;
}

int CoordinatorView::WaitJobEnd() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return job_code_.has_value(); });
  return *job_code_;
}

std::optional<int> CoordinatorView::WaitJobEndFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return job_code_.has_value(); });
  return job_code_;
}

void CoordinatorView::CountMessage(MsgType type) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.messages;
  if (type == MsgType::kHeartbeat) ++stats_.heartbeats;
}

void CoordinatorView::CountRejectedMessage() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.rejected_messages;
}

void CoordinatorView::CountRefusedPeers(uint64_t refused, uint64_t closed) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.rejected_peers += refused;
  stats_.closed_connections = closed;
}

void CoordinatorView::SetThreadCpu(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.thread_cpu_seconds = seconds;
}

void CoordinatorView::Publish(const Membership& m, const RoleStats& role) {
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = m;
  stats_.primary = role.primary;
  stats_.fenced = role.fenced;
  stats_.generation = role.generation;
  stats_.standby_slot = role.standby_slot;
  stats_.synced = role.synced;
  stats_.takeovers = role.takeovers;
}

void CoordinatorView::StartEpoch(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.epoch = epoch;
  stats_.epoch_declared_at = stats_.epoch_sent_at = SteadyClock::now();
}

void CoordinatorView::EpochSent(uint64_t epoch, SteadyClock::time_point declared) {
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch == stats_.epoch) return;
  stats_.epoch = epoch;
  stats_.epoch_declared_at = declared;
  stats_.epoch_sent_at = SteadyClock::now();
}

void CoordinatorView::EndJob(int code) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!job_code_) job_code_ = code;
  cv_.notify_all();
}

void CoordinatorView::Fail(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = s;
  if (!job_code_) job_code_ = 1;
  cv_.notify_all();
}

void CoordinatorView::Fence() {
  std::lock_guard<std::mutex> lock(mu_);
  fenced_ = true;
  if (!job_code_) job_code_ = 1;
  cv_.notify_all();
}

}  // namespace rtft::control
