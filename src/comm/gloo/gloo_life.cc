// The Gloo communicator's life after its start (gloo_comm.cc): the watcher that turns a dead
// peer into an abort, the buffers its calls register, Abort() itself, and a clean goodbye.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/gloo/gloo_comm.h"
#include "comm/gloo/sigpipe_guard.h"
#include "core/logging.h"
#include "core/thread.h"

namespace rtft::comm::gloo_backend {
namespace {

// How long a clean close waits for its bye frames to leave.
constexpr milliseconds kByeTimeout{1000};
// "Forever" for the watcher's wait (Gloo would close every pair if it ever timed out).
constexpr milliseconds kWatchForever{50LL * 365 * 24 * 3600 * 1000};

}  // namespace

Buf::Buf(GlooComm* comm, std::unique_ptr<gloo::transport::UnboundBuffer> ub)
    : comm_(comm), ub_(std::move(ub)) {
  comm_->Register(ub_.get());
}

Buf::~Buf() { comm_->Unregister(ub_.get()); }

Status GlooComm::StartWatcher() {
  bye_frames_.assign(size_, Frame());
  RTFT_ASSIGN_OR_RETURN(bye_buf_, NewBuf(bye_frames_.data(), bye_frames_.size() * sizeof(Frame)));
  for (int p = 0; p < size_; ++p)
    if (connected_[p]) RTFT_RETURN_IF_ERROR(Listen(p));
  RTFT_ASSIGN_OR_RETURN(watcher_, Thread::Start("rtft-gloo-watch", [this] { Watch(); }));
  return Status::Ok();
}

Status GlooComm::Listen(int p) {
  try {
    bye_buf_->get()->recv(p, kSlotBye, p * sizeof(Frame), sizeof(Frame));
  } catch (const std::exception& e) {
    Abort(std::string("posting the watcher's receive from rank ") + std::to_string(p) + ": " +
          e.what());
    return Usable();
  }
  return Status::Ok();
}

// Runs for the communicator's life (a pair connected later adds its receive). Never throws:
// everything Gloo throws becomes an abort.
void GlooComm::Watch() {
  while (!watcher_stop_) {
    int src = -1;
    bool done = false;
    try {
      done = bye_buf_->get()->waitRecv(&src, kWatchForever);
    } catch (const std::exception& e) {
      if (!watcher_stop_) Abort(std::string("a peer's connection failed: ") + e.what());
      return;
    } catch (...) {
      if (!watcher_stop_) Abort("a peer's connection failed");
      return;
    }
    if (!done) return;  // Abort() or the destructor woke us
    if (src < 0 || src >= size_ || src == rank_) continue;
    Frame f = bye_frames_[src];
    const uint64_t check = f.check;
    Seal(&f);
    if (f.magic != kFrameMagic || check != f.check || f.comm_id != comm_id_ ||
        f.src != static_cast<uint32_t>(src) || f.op != static_cast<uint16_t>(OpKind::kBye)) {
      Abort("rank " + std::to_string(src) + " sent a malformed goodbye");
      return;
    }
    RTFT_LOG(kDebug, kLogComm) << "communicator '" << name() << "': rank " << src << " left";
  }
}

void GlooComm::SayBye() {
  SigpipeGuard sigpipe;
  std::vector<Frame> out(size_);
  std::vector<std::unique_ptr<Buf>> bufs;
  const Clock::time_point deadline = Clock::now() + kByeTimeout;
  for (int p = 0; p < size_; ++p) {
    if (!connected_[p]) continue;
    Frame& f = out[p];
    f.op = static_cast<uint16_t>(OpKind::kBye);
    f.comm_id = comm_id_;
    f.src = rank_;
    f.dst = p;
    Seal(&f);
    auto b = NewBuf(&f, sizeof(Frame));
    if (!b.ok()) return;
    try {
      (*b)->get()->send(p, kSlotBye, 0, sizeof(Frame));
    } catch (const std::exception&) {
      continue;  // that peer is gone already
    }
    bufs.push_back(std::move(*b));
  }
  for (auto& b : bufs)
    if (!WaitSend(b.get(), deadline).ok()) break;
}

GlooComm::~GlooComm() {
  if (subscribed_) opts_.o.aborts->Unsubscribe(abort_token_);
  if (context_ && watcher_.running() && Usable().ok()) SayBye();
  watcher_stop_ = true;
  if (bye_buf_) bye_buf_->get()->abortWaitRecv();
  watcher_.Join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    closable_ = false;  // no closer starts any more
  }
  closer_.Join();
  // After a pair is closed, Gloo's thread no longer touches any buffer of ours.
  if (context_) ClosePairs(Created());
  bye_buf_.reset();
  context_.reset();
  device_.reset();
}

void GlooComm::Register(gloo::transport::UnboundBuffer* ub) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.insert(ub);
  if (aborted_) {
    ub->abortWaitRecv();
    ub->abortWaitSend();
  }
}

void GlooComm::Unregister(gloo::transport::UnboundBuffer* ub) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(ub);
}

void GlooComm::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    if (broken_.ok()) broken_ = Status::Aborted(reason);
    aborted_ = true;
    for (auto* ub : live_) {
      ub->abortWaitRecv();
      ub->abortWaitSend();
    }
    // Closing the pairs tells the peers at once (they see the connection end) and wakes a pair
    // still connecting; it waits for Gloo's event loop, so it runs on a thread of its own.
    if (closable_) {
      auto closer = Thread::Start("rtft-gloo-close", [this] { ClosePairs(Created()); });
      // Without a thread the peers see the end at their next call's deadline instead.
      if (closer.ok()) closer_ = std::move(*closer);
    }
  }
  RTFT_LOG(kInfo, kLogComm) << "communicator '" << name() << "' of epoch " << epoch()
                            << " aborted: " << reason;
}

StatusOr<std::unique_ptr<Buf>> GlooComm::NewBuf(const void* ptr, size_t bytes) {
  try {
    auto ub = context_->createUnboundBuffer(const_cast<void*>(ptr), bytes);
    return std::make_unique<Buf>(this, std::move(ub));
  } catch (const std::exception& e) {
    return Status::ResourceExhausted(std::string("creating a Gloo buffer: ") + e.what());
  }
}

Status GlooComm::WaitRecv(Buf* buf, Clock::time_point deadline) {
  try {
    if (buf->get()->waitRecv(nullptr, Remaining(deadline))) return Status::Ok();
  } catch (const std::exception& e) {
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded("the deadline passed (RTFT_COMM_TIMEOUT_MS, or the call's)");
    Abort(std::string("a peer's connection failed: ") + e.what());
  }
  return Usable();
}

Status GlooComm::WaitSend(Buf* buf, Clock::time_point deadline) {
  try {
    if (buf->get()->waitSend(nullptr, Remaining(deadline))) return Status::Ok();
  } catch (const std::exception& e) {
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded("the deadline passed (RTFT_COMM_TIMEOUT_MS, or the call's)");
    Abort(std::string("a peer's connection failed: ") + e.what());
  }
  return Usable();
}

std::set<int> GlooComm::Created() const {
  std::lock_guard<std::mutex> lock(mu_);
  return created_;
}

Status GlooComm::Usable() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) return aborted_ ? Status::Aborted("communicator aborted") : Status::Ok();
  if (broken_.code() == StatusCode::kAborted) return broken_;
  return Status::Aborted("communicator '" + opts_.o.name + "' is unusable after an earlier " +
                         "error: " + broken_.ToString());
}

Status GlooComm::Break(const Status& why, const std::set<int>& peers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = why;
  }
  ClosePairs(peers);
  return why;
}

// Closing a pair waits for the next tick of Gloo's event loop (up to 10 ms), so that its handler
// is not running; pairs closed at once share that tick, closed one by one they would not.
void GlooComm::ClosePairs(const std::set<int>& peers) {
  auto close = [this](int p) {
    try {
      auto& pair = context_->getPair(p);
      if (pair) pair->close();
    } catch (...) {
      // Best effort: a pair that cannot close has failed already.
    }
  };
  const std::vector<int> list(peers.begin(), peers.end());
  const size_t threads = std::min<size_t>(16, list.size());
  if (threads <= 1) {
    for (int p : list) close(p);
    return;
  }
  // A share of the pairs per thread; a share whose thread cannot start is closed here.
  std::vector<Thread> pool;
  auto share = [&](size_t t) {
    for (size_t i = t; i < list.size(); i += threads) close(list[i]);
  };
  std::vector<size_t> here = {0};
  for (size_t t = 1; t < threads; ++t) {
    auto th = Thread::Start("rtft-gloo-close", [&share, t] { share(t); });
    if (th.ok())
      pool.push_back(std::move(*th));
    else
      here.push_back(t);
  }
  for (size_t t : here) share(t);
  for (auto& th : pool) th.Join();
}

Status GlooComm::Wait(void*, std::chrono::milliseconds) { return Usable(); }

}  // namespace rtft::comm::gloo_backend
