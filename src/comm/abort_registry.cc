// EpochAbortRegistry: failure events reach communicators through it. The lifetime rule that
// matters: Unsubscribe waits while that subscriber's abort is running, so a communicator that
// unsubscribes in its destructor is never called after it is gone.
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "rtft/comm.h"

namespace rtft {

struct EpochAbortRegistry::State {
  std::mutex mu;
  std::condition_variable done;
  uint64_t epoch = 0;
  Token next = 1;
  struct Sub {
    uint64_t epoch;
    std::function<void()> abort;
  };
  std::map<Token, Sub> subs;
  std::multiset<Token> running;
};

EpochAbortRegistry::EpochAbortRegistry(uint64_t epoch) : state_(std::make_unique<State>()) {
  state_->epoch = epoch;
}

EpochAbortRegistry::~EpochAbortRegistry() = default;

AbortRegistry::Token EpochAbortRegistry::Subscribe(uint64_t epoch, std::function<void()> abort) {
  std::unique_lock<std::mutex> lock(state_->mu);
  const Token token = state_->next++;
  if (epoch >= state_->epoch) {
    state_->subs[token] = {epoch, std::move(abort)};
    return token;
  }
  // Already stale: abort at once, under the same running rule as Advance.
  state_->running.insert(token);
  lock.unlock();
  if (abort) abort();
  lock.lock();
  state_->running.erase(state_->running.find(token));
  state_->done.notify_all();
  return token;
}

void EpochAbortRegistry::Unsubscribe(Token token) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->subs.erase(token);
  state_->done.wait(lock, [&] { return state_->running.count(token) == 0; });
}

uint64_t EpochAbortRegistry::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->epoch;
}

void EpochAbortRegistry::Advance(uint64_t epoch) {
  std::vector<std::pair<Token, std::function<void()>>> due;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (epoch > state_->epoch) state_->epoch = epoch;
    for (auto it = state_->subs.begin(); it != state_->subs.end();) {
      if (it->second.epoch < state_->epoch) {
        state_->running.insert(it->first);
        due.emplace_back(it->first, std::move(it->second.abort));
        it = state_->subs.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [token, abort] : due) {
    if (abort) abort();
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->running.erase(state_->running.find(token));
    state_->done.notify_all();
  }
}

}  // namespace rtft
