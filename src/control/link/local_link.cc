#include "control/link/local_link.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>

#include "control/net/event_loop.h"
#include "control/wire/messages.h"
#include "core/host_env.h"
#include "core/logging.h"

namespace rtft::control {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr size_t kMaxSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1
constexpr milliseconds kKvRoundTrip{2000};

Status CheckPrivateDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash ? slash : 1);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "local link directory " + dir);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a directory");
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return Status::PermissionDenied("local link directory " + dir +
                                    " must belong to this user with mode 0700");
  return Status::Ok();
}

zmq::socket_t MakeSocket(zmq::context_t& ctx, zmq::socket_type type) {
  zmq::socket_t s(ctx, type);
  ConfigureSocket(s);
  return s;
}

// Each end of the link runs one event loop (net/event_loop.h) with its one socket.
EventLoop::Options LinkLoopOptions() {
  EventLoop::Options o;
  o.thread_name = "rtft-link";
  o.what = "the local link's thread";
  return o;
}

class LocalServerImpl final : public LocalServer {
 public:
  explicit LocalServerImpl(std::string path) : path_(std::move(path)), ctx_(1) {}
  ~LocalServerImpl() override {
    if (loop_) loop_->Stop();
    loop_.reset();
    ::unlink(path_.c_str());
  }

  Status Init() {
    try {
      ::unlink(path_.c_str());  // a stale socket of a previous agent
      zmq::socket_t s = MakeSocket(ctx_, zmq::socket_type::router);
      s.bind("ipc://" + path_);
      loop_ = std::make_unique<EventLoop>(LinkLoopOptions());
      socket_ = loop_->AddSocket(
          std::move(s), true, "local link",
          [this](const std::string& peer, Message m) { OnMessage(peer, std::move(m)); });
    } catch (const zmq::error_t& e) {
      return Status::Unavailable("binding ipc://" + path_ + ": " + e.what());
    }
    return loop_->Start();
  }

  const std::string& path() const override { return path_; }

  StatusOr<int32_t> WaitAttach(milliseconds timeout) override {
    RTFT_RETURN_IF_ERROR(loop_->error());
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !attaches_.empty(); }))
      return Status::DeadlineExceeded("no application attached to " + path_ + " within " +
                                      std::to_string(timeout.count()) + " ms");
    const int32_t pid = attaches_.front();
    attaches_.pop_front();
    return pid;
  }

  Status SendAssignment(const Assignment& a) override {
    return Send(MsgType::kAssign, AssignBody(a));
  }
  Status SendEvent(const ControlEvent& e) override {
    return Send(MsgType::kLocalEvent, LocalEventBody(e));
  }
  Status SendKvReply(const std::string& key, const StatusOr<std::string>& value) override {
    return Send(MsgType::kLocalKvReply, LocalKvReplyBody(key, value));
  }
  Status SendGatherReply(const std::string& key, const StatusOr<GatherReply>& reply) override {
    return Send(MsgType::kLocalGatherReply, LocalGatherReplyBody(key, reply));
  }
  Status SendPause(const PauseNotice& notice) override {
    return Send(MsgType::kLocalPause, PauseBody(notice));
  }

  StatusOr<std::optional<RuntimeReport>> PollReport(milliseconds timeout) override {
    RTFT_RETURN_IF_ERROR(loop_->error());
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !reports_.empty(); });
    if (reports_.empty()) return std::optional<RuntimeReport>();
    RuntimeReport r = std::move(reports_.front());
    reports_.pop_front();
    return std::optional<RuntimeReport>(std::move(r));
  }

 private:
  Status Send(MsgType type, const json& body) {
    std::string peer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (peer_.empty()) return Status::FailedPrecondition("no application attached to " + path_);
      peer = peer_;
    }
    return loop_->Post(socket_, peer, type, body);
  }

  void OnMessage(const std::string& peer, Message m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (m.type == MsgType::kAttach) {
      peer_ = peer;  // the newest process wins: an earlier one has exited or is being replaced
      attaches_.push_back(m.body["pid"].get<int32_t>());
      reports_.clear();
    } else if (m.type == MsgType::kReport && peer == peer_) {
      reports_.push_back(ReportFrom(m.body));
    } else {
      RTFT_LOG(kWarn, kLogCtrl) << "local link " << path_ << ": dropped " << MsgTypeName(m.type)
                                << (peer == peer_ ? "" : " from a process that is not attached");
      return;
    }
    cv_.notify_all();
  }

  const std::string path_;
  zmq::context_t ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string peer_;
  std::deque<int32_t> attaches_;
  std::deque<RuntimeReport> reports_;
  EventLoop::SocketId socket_ = 0;
  std::unique_ptr<EventLoop> loop_;  // last: its thread calls OnMessage
};

class LocalClientImpl final : public LocalClient {
 public:
  explicit LocalClientImpl(std::string path) : path_(std::move(path)), ctx_(1) {}
  ~LocalClientImpl() override {
    if (loop_) loop_->Stop();
    loop_.reset();
  }

  Status Init() {
    try {
      zmq::socket_t s = MakeSocket(ctx_, zmq::socket_type::dealer);
      s.connect("ipc://" + path_);
      loop_ = std::make_unique<EventLoop>(LinkLoopOptions());
      socket_ =
          loop_->AddSocket(std::move(s), false, "local link",
                           [this](const std::string&, Message m) { OnMessage(std::move(m)); });
    } catch (const zmq::error_t& e) {
      return Status::Unavailable("connecting ipc://" + path_ + ": " + e.what());
    }
    return loop_->Start();
  }

  Status Attach(int32_t pid) override {
    return loop_->Post(socket_, "", MsgType::kAttach, AttachBody(pid));
  }

  StatusOr<Assignment> WaitAssignment(milliseconds timeout) override {
    RTFT_RETURN_IF_ERROR(loop_->error());
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !assignments_.empty(); }))
      return Status::DeadlineExceeded("no assignment from the agent within " +
                                      std::to_string(timeout.count()) + " ms");
    Assignment a = assignments_.front();
    assignments_.pop_front();
    return a;
  }

  StatusOr<std::optional<ControlEvent>> PollEvent(milliseconds timeout) override {
    RTFT_RETURN_IF_ERROR(loop_->error());
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || pause_.has_value(); });
    if (events_.empty()) return std::optional<ControlEvent>();
    ControlEvent e = std::move(events_.front());
    events_.pop_front();
    return std::optional<ControlEvent>(std::move(e));
  }

  std::optional<PauseNotice> TakePause() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<PauseNotice> p;
    std::swap(p, pause_);
    return p;
  }

  Status Report(const RuntimeReport& report) override {
    return loop_->Post(socket_, "", MsgType::kReport, ReportBody(report));
  }

  Status KvPut(const std::string& key, const std::string& value) override {
    if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes)
      return Status::InvalidArgument("KV key or value too large");
    RuntimeReport r;
    r.type = RuntimeReport::Type::kKvPut;
    r.key = key;
    r.value = value;
    return Report(r);
  }

  StatusOr<std::string> KvGet(const std::string& key, milliseconds timeout) override {
    if (key.size() > kMaxKeyBytes) return Status::InvalidArgument("KV key too large");
    RuntimeReport r;
    r.type = RuntimeReport::Type::kKvGet;
    r.key = key;
    r.timeout_ms = std::max<int64_t>(0, timeout.count());
    RTFT_RETURN_IF_ERROR(Report(r));
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, milliseconds(r.timeout_ms) + kKvRoundTrip,
                      [&] { return !kv_replies_[key].empty(); })) {
      return Status::DeadlineExceeded("no KV answer for '" + key + "' from the agent");
    }
    StatusOr<std::string> v = std::move(kv_replies_[key].front());
    kv_replies_[key].pop_front();
    if (kv_replies_[key].empty()) kv_replies_.erase(key);
    return v;
  }

  StatusOr<GatherReply> Gather(const GatherRequest& g) override {
    if (g.key.size() > kMaxKeyBytes || g.value.size() > kMaxGatherValueBytes)
      return Status::InvalidArgument("gather key or contribution too large");
    RuntimeReport r;
    r.type = RuntimeReport::Type::kGather;
    r.key = g.key;
    r.value = g.value;
    r.timeout_ms = std::max<int64_t>(0, g.timeout_ms);
    r.epoch = g.epoch;
    r.members = g.members;
    r.index = g.index;
    r.all = g.all;
    RTFT_RETURN_IF_ERROR(Report(r));
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, milliseconds(r.timeout_ms) + kKvRoundTrip,
                      [&] { return !gather_replies_[g.key].empty(); })) {
      gather_replies_.erase(g.key);
      return Status::DeadlineExceeded("no answer to gather '" + g.key + "' from the agent");
    }
    StatusOr<GatherReply> v = std::move(gather_replies_[g.key].front());
    gather_replies_[g.key].pop_front();
    if (gather_replies_[g.key].empty()) gather_replies_.erase(g.key);
    return v;
  }

  Status GatherResult(const std::string& key, uint64_t epoch, const std::string& value) override {
    if (key.size() > kMaxKeyBytes || value.size() > kMaxGatherResultBytes)
      return Status::InvalidArgument("gather key or result too large");
    RuntimeReport r;
    r.type = RuntimeReport::Type::kGatherResult;
    r.key = key;
    r.value = value;
    r.epoch = epoch;
    return Report(r);
  }

 private:
  void OnMessage(Message m) {
    std::lock_guard<std::mutex> lock(mu_);
    switch (m.type) {
      case MsgType::kLocalGatherReply:
        gather_replies_[m.body["key"].get<std::string>()].push_back(GatherReplyFrom(m.body));
        break;
      case MsgType::kAssign:
        assignments_.push_back(AssignmentFrom(m.body));
        break;
      case MsgType::kLocalEvent:
        events_.push_back(LocalEventFrom(m.body));
        break;
      case MsgType::kLocalPause:
        pause_ = PauseFrom(m.body);  // the newest notice replaces one not taken yet
        break;
      case MsgType::kLocalKvReply: {
        Status s = StatusFrom(m.body);
        StatusOr<std::string> v =
            s.ok() ? StatusOr<std::string>(BytesFrom(m.body["value"])) : StatusOr<std::string>(s);
        if (s.ok() && !m.body.contains("value")) v = Status::Internal("KV reply without a value");
        kv_replies_[m.body["key"].get<std::string>()].push_back(std::move(v));
        break;
      }
      default:
        RTFT_LOG(kWarn, kLogCtrl) << "local link: unexpected " << MsgTypeName(m.type);
        return;
    }
    cv_.notify_all();
  }

  const std::string path_;
  zmq::context_t ctx_;
  std::optional<PauseNotice> pause_;  // mu_'s: the newest notice, until taken
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Assignment> assignments_;
  std::deque<ControlEvent> events_;
  std::map<std::string, std::deque<StatusOr<std::string>>> kv_replies_;
  std::map<std::string, std::deque<StatusOr<GatherReply>>> gather_replies_;
  EventLoop::SocketId socket_ = 0;
  std::unique_ptr<EventLoop> loop_;  // last: its thread calls OnMessage
};

}  // namespace

namespace {

// Removes link directories of agents that died without removing theirs (SIGKILL): the pid in
// the name is gone. Only this user's own directories (not links) are touched.
void RemoveStaleLinkDirs(const std::string& parent) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0, used = 0;
    if (std::sscanf(name.c_str(), "rtft-agent-%d-%n", &pid, &used) != 1 || used == 0 || pid <= 0 ||
        name.size() != static_cast<size_t>(used) + 6)
      continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
      continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

StatusOr<std::string> MakeLocalLinkDir() {
  const std::string parent = TempDirectory();
  RemoveStaleLinkDirs(parent);
  std::string tmpl = parent + "/rtft-agent-" + std::to_string(::getpid()) + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return Status::FromErrno(errno, "mkdtemp " + tmpl);
  return tmpl;  // mkdtemp creates it with mode 0700
}

StatusOr<std::unique_ptr<LocalServer>> LocalServer::Bind(const std::string& path) {
  if (path.empty() || path.size() > kMaxSocketPath)
    return Status::InvalidArgument("local link path must have 1 to " +
                                   std::to_string(kMaxSocketPath) + " characters: " + path);
  RTFT_RETURN_IF_ERROR(CheckPrivateDir(path));
  auto s = std::make_unique<LocalServerImpl>(path);
  RTFT_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<LocalServer>(std::move(s));
}

StatusOr<std::unique_ptr<LocalClient>> LocalClient::Connect(const std::string& path) {
  if (path.empty() || path.size() > kMaxSocketPath)
    return Status::InvalidArgument("local link path must have 1 to " +
                                   std::to_string(kMaxSocketPath) + " characters: " + path);
  auto c = std::make_unique<LocalClientImpl>(path);
  RTFT_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<LocalClient>(std::move(c));
}

}  // namespace rtft::control
