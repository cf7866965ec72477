#include "control/coordinator/hang_detector.h"

#include <algorithm>
#include <map>

namespace rtft::control {
namespace {

using std::chrono::milliseconds;

// Step times kept for the median, and how many it needs.
constexpr size_t kStepWindow = 64;
constexpr size_t kMinSteps = 3;

int64_t Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

std::string List(const std::vector<LogicalRank>& ranks) {
  std::string s;
  for (LogicalRank r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

int64_t HangDetector::Rank::AgeAt(Clock::time_point now) const {
  return age_ms < 0 ? -1 : age_ms + std::max<int64_t>(0, Ms(now - age_at));
}

void HangDetector::Reset(int32_t world, Clock::time_point now) {
  ranks_.assign(static_cast<size_t>(std::max(world, 0)), Rank());
  step_ms_.clear();
  epoch_at_ = now;
  decided_ = false;
}

void HangDetector::Observe(LogicalRank rank, uint64_t step, const CallProgress& p,
                           Clock::time_point now) {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size()) return;
  Rank& r = ranks_[rank];
  if (!r.seen) {
    r.seen = true;
    r.step = step;
    r.step_at = r.moved_at = now;
  } else if (step != r.step) {
    // A step's time: from the last change, over the steps it covers (a heartbeat may span
    // several). The first change of an epoch ends a partial step and is not counted.
    if (step > r.step && r.step_moved) {
      step_ms_.push_back(static_cast<double>(Ms(now - r.step_at)) /
                         static_cast<double>(step - r.step));
      if (step_ms_.size() > kStepWindow) step_ms_.pop_front();
    }
    r.step_moved = true;
    r.step = step;
    r.step_at = r.moved_at = now;
  }
  if (p.age_ms < 0) {
    // The application that sampled is gone (a new one has not sampled yet, or it exited).
    if (r.sampled) r.moved_at = now;
    r.sampled = false;
    r.in_call = r.long_phase = false;
    r.peer = -1;
    return;
  }
  if (!r.sampled || p.calls != r.calls || p.in_call != r.in_call) r.moved_at = now;
  r.sampled = true;
  r.calls = p.calls;
  r.in_call = p.in_call;
  r.peer = p.peer;
  r.long_phase = p.long_phase;
  r.age_ms = p.age_ms;
  r.age_at = now;
}

std::optional<double> HangDetector::MedianStepMs() const {
  if (step_ms_.size() < kMinSteps) return std::nullopt;
  std::vector<double> v(step_ms_.begin(), step_ms_.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

milliseconds HangDetector::Bound() const {
  const auto median = MedianStepMs();
  const bool long_phase =
      std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.long_phase; });
  if (!median || long_phase) return std::max(o_.first_step, o_.min);
  const double k_median = static_cast<double>(o_.k) * *median;
  // Clamped to a day: a median of hours must not overflow the bound.
  const double capped = std::min(k_median, 24.0 * 3600 * 1000);
  return std::max(o_.min, milliseconds(static_cast<int64_t>(capped)));
}

std::string HangDetector::Describe(LogicalRank r, Clock::time_point now) const {
  const Rank& x = ranks_[r];
  std::string s = "rank " + std::to_string(r) + " at step " + std::to_string(x.step) +
                  ", no progress for " + std::to_string(Ms(now - x.moved_at)) + " ms, ";
  if (!x.sampled) return s + "its application has sent no progress sample";
  const int64_t age = x.AgeAt(now);
  if (age > Bound().count())
    return s + "its application silent for " + std::to_string(age) + " ms (stopped?)";
  if (!x.in_call) return s + "outside any collective (in its compute or update)";
  s += "inside call " + std::to_string(x.calls) + " of its communicators, ";
  return s + (x.peer >= 0 ? "waiting on rank " + std::to_string(x.peer) : "waiting on no peer");
}

std::optional<HangDetector::Verdict> HangDetector::Check(
    Clock::time_point now, const std::vector<LogicalRank>& gathering) {
  if (!enabled() || decided_ || ranks_.empty()) return std::nullopt;
  const milliseconds bound = Bound();
  const size_t world = ranks_.size();
  const auto still = [&](const Rank& r) { return now - r.moved_at > bound; };
  std::vector<bool> in_gather(world, false);
  for (LogicalRank g : gathering)
    if (g >= 0 && static_cast<size_t>(g) < world) in_gather[g] = true;
  // Those waiting for someone: inside a call of a live application, or in a gather of the
  // coordinator, with no progress since. The stalled: every rank with no progress past the
  // bound, but those in a gather (they wait on the others).
  std::vector<LogicalRank> waiters, stalled;
  std::vector<bool> is_stalled(world, false);
  for (size_t i = 0; i < world; ++i) {
    const Rank& r = ranks_[i];
    // Its age now, not at its last heartbeat: else a stopped application whose last sample was
    // inside a call looks live and waiting for the heartbeat's period past the bound.
    const bool live = r.sampled && r.AgeAt(now) <= bound.count();
    if (((live && r.in_call) || in_gather[i]) && still(r))
      waiters.push_back(static_cast<LogicalRank>(i));
    // A rank that never sent anything this epoch counts once the first step's bound is past.
    const bool stopped = r.seen ? still(r) : now - epoch_at_ > bound;
    if (stopped && !in_gather[i]) {
      stalled.push_back(static_cast<LogicalRank>(i));
      is_stalled[i] = true;
    }
  }
  if (waiters.empty()) return std::nullopt;
  // The culprits, from the clearest sign to the weakest: an application that stopped sampling
  // (stopped, or frozen whole), one outside any call while the others wait, one inside a call
  // but waiting on no peer while the others wait on theirs, the peer most of them wait on.
  std::vector<LogicalRank> silent, outside, unwaiting;
  std::map<int32_t, int> named;
  for (LogicalRank i : stalled) {
    const Rank& r = ranks_[i];
    if (!r.sampled || r.AgeAt(now) > bound.count()) {
      silent.push_back(i);
    } else if (!r.in_call) {
      outside.push_back(i);
    } else if (r.peer < 0) {
      unwaiting.push_back(i);
    } else {
      ++named[r.peer];
    }
  }
  // A group is blamed only while a rank outside it waits: ranks that all wait inside a call on
  // no peer, with no other waiter, wait on a rank whose own stall is not past the bound yet (one
  // that started later than they did, say), not on each other.
  const auto waited_on = [&](const std::vector<LogicalRank>& group) {
    return std::any_of(waiters.begin(), waiters.end(), [&](LogicalRank w) {
      return std::find(group.begin(), group.end(), w) == group.end();
    });
  };
  std::vector<LogicalRank> culprits;
  for (const auto* group : {&silent, &outside, &unwaiting}) {
    if (!group->empty() && group->size() < world && waited_on(*group)) {
      culprits = *group;
      break;
    }
  }
  if (culprits.empty() && !named.empty()) {
    auto most = std::max_element(named.begin(), named.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    const int ties = static_cast<int>(std::count_if(
        named.begin(), named.end(), [&](const auto& e) { return e.second == most->second; }));
    if (ties == 1 && most->first >= 0 && static_cast<size_t>(most->first) < world) {
      // The peer they wait on may itself wait inside its call on another, whose stall the
      // heartbeats show a beat later (each rank's is stamped when its heartbeat comes): the
      // end of that chain is the culprit, and only once it is stalled itself. A cycle of
      // waits names the peer most wait on.
      LogicalRank end = most->first;
      std::vector<bool> on_chain(world, false);
      while (true) {
        on_chain[end] = true;
        const Rank& r = ranks_[end];
        const bool waits = r.sampled && r.in_call && r.peer >= 0 &&
                           static_cast<size_t>(r.peer) < world && !in_gather[end];
        if (!waits) break;
        if (on_chain[r.peer]) {
          end = most->first;
          break;
        }
        end = r.peer;
      }
      if (is_stalled[end]) culprits = {end};
    }
  }
  if (culprits.empty()) return std::nullopt;
  decided_ = true;
  Verdict v;
  v.ranks = culprits;
  for (LogicalRank r : culprits) v.why += (v.why.empty() ? "" : "; ") + Describe(r, now);
  const auto median = MedianStepMs();
  std::vector<LogicalRank> others;
  for (LogicalRank w : waiters)
    if (std::find(culprits.begin(), culprits.end(), w) == culprits.end()) others.push_back(w);
  v.why += " (rank(s) " + List(others) + " waited past " + std::to_string(bound.count()) + " ms: " +
           (median ? std::to_string(o_.k) + " x the median step of " +
                         std::to_string(static_cast<int64_t>(*median)) + " ms, at least " +
                         std::to_string(o_.min.count()) + " ms"
                   : std::string("the first step's bound")) +
           ")";
  return v;
}

}  // namespace rtft::control
