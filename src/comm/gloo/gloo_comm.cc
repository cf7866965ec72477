// The Gloo communicator's start: rendezvous through the store and one authenticated pair per
// peer (the watcher, Abort() and the goodbye are in gloo_life.cc).
#include "comm/gloo/gloo_comm.h"

#include "comm/gloo/sigpipe_guard.h"
#include "comm/watch.h"

#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <nlohmann/json.hpp>

#include "core/fault_point.h"
#include "core/logging.h"
#include "core/params.h"

namespace rtft::comm {

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const ResolvedOptions& options) {
  return gloo_backend::GlooComm::Create(options);
}

void WatchCalls(Communicator* comm, std::vector<int> job_ranks) {
  auto* gloo = dynamic_cast<gloo_backend::GlooComm*>(comm);
  if (gloo == nullptr || job_ranks.size() != static_cast<size_t>(comm->world_size())) return;
  gloo->WatchCalls(std::move(job_ranks));
}

namespace gloo_backend {
namespace {

using nlohmann::json;

// 2: one record per pair (1 held one address per peer).
constexpr uint32_t kRecordVersion = 2;
// RTFT_COMM_GLOO_PAIRS=auto connects every pair up to this many ranks, the ring's beyond.
constexpr int kMeshAutoRanks = 64;
// The most ranks that connect every pair: N(N-1) records of about 400 bytes in the job's store
// (105 MB at 512 ranks, against its 256 MiB).
constexpr int kMeshMaxRanks = 512;
// How long one store lookup may block before Create() looks at its abort flag again.
constexpr milliseconds kStoreSlice{50};

std::string ThisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

StatusOr<size_t> SegmentBytes() {
  RTFT_ASSIGN_OR_RETURN(uint64_t bytes, ParamBytes(Param::kCommSegmentBytes));
  if (bytes < 4096 || bytes > (uint64_t{1} << 30))
    return Status::InvalidArgument("RTFT_COMM_SEGMENT_BYTES=" + std::to_string(bytes) +
                                   ": use 4K to 1G");
  return static_cast<size_t>(bytes & ~uint64_t{63});
}

// Which pairs a communicator connects when it is made: every pair (a full mesh: N(N-1)
// addresses through the store) or the two ring neighbours, whose pairs are all the collectives
// use; any other pair then connects at its first send or receive (docs/comm.md, "Which pairs
// connect").
StatusOr<bool> FullMesh(int size, const std::string& name) {
  const std::string v = ParamString(Param::kCommGlooPairs);
  if (v == "ring") return false;
  if (v == "auto") return size <= kMeshAutoRanks;
  if (v != "all")
    return Status::InvalidArgument("RTFT_COMM_GLOO_PAIRS='" + v + "': use all, ring or auto");
  if (size > kMeshMaxRanks)
    return Status::InvalidArgument(
        "RTFT_COMM_GLOO_PAIRS=all: communicator '" + name + "' of " + std::to_string(size) +
        " ranks would put " + std::to_string(uint64_t(size) * (size - 1)) +
        " pair addresses in the job's store (at most " + std::to_string(kMeshMaxRanks) +
        " ranks connect every pair): use ring or auto");
  return true;
}

// Whether this side of a pair connects (true) or listens (false), decided as Gloo's
// tcp::Pair::connect decides it: the side with the higher address (IP, then port) connects.
StatusOr<bool> ConnectingSide(const std::vector<char>& self, const std::vector<char>& peer) {
  sockaddr_storage a{}, b{};
  try {
    a = gloo::transport::tcp::Address(self).getSockaddr();
    b = gloo::transport::tcp::Address(peer).getSockaddr();
  } catch (const std::exception& e) {
    return Status::DataLoss(std::string("a peer published an address Gloo cannot read: ") +
                            e.what());
  }
  if (a.ss_family != b.ss_family)
    return Status::InvalidArgument("a peer listens on another address family than this rank");
  int rv = 0;
  if (a.ss_family == AF_INET) {
    const auto* sa = reinterpret_cast<const sockaddr_in*>(&a);
    const auto* sb = reinterpret_cast<const sockaddr_in*>(&b);
    rv = std::memcmp(&sa->sin_addr, &sb->sin_addr, sizeof(in_addr));
    if (rv == 0) rv = sa->sin_port - sb->sin_port;
  } else if (a.ss_family == AF_INET6) {
    const auto* sa = reinterpret_cast<const sockaddr_in6*>(&a);
    const auto* sb = reinterpret_cast<const sockaddr_in6*>(&b);
    rv = std::memcmp(&sa->sin6_addr, &sb->sin6_addr, sizeof(in6_addr));
    if (rv == 0) rv = sa->sin6_port - sb->sin6_port;
  } else {
    return Status::InvalidArgument("a peer published an address of an unknown family");
  }
  if (rv == 0) return Status::InvalidArgument("a peer published this rank's own address");
  return rv > 0;
}

}  // namespace

GlooComm::GlooComm(const ResolvedOptions& options)
    : opts_(options),
      rank_(options.o.rank),
      size_(options.o.world_size),
      comm_id_(CommId(options.o.epoch, options.o.name)),
      peers_(options.o.world_size),
      connected_(options.o.world_size, 0) {}

StatusOr<std::unique_ptr<Communicator>> GlooComm::Create(const ResolvedOptions& options) {
  std::unique_ptr<GlooComm> c(new GlooComm(options));
  RTFT_ASSIGN_OR_RETURN(c->segment_bytes_, SegmentBytes());
  if (options.o.aborts != nullptr) {
    GlooComm* self = c.get();
    c->abort_token_ = options.o.aborts->Subscribe(options.o.epoch, [self] {
      self->Abort("a failure event ended epoch " + std::to_string(self->epoch()));
    });
    c->subscribed_ = true;
  }
  if (c->size_ > 1) {
    const Status s = c->Connect();
    if (!s.ok())
      return s.Annotate("creating communicator '" + options.o.name + "' of epoch " +
                        std::to_string(options.o.epoch));
  }
  RTFT_LOG(kDebug, kLogComm) << "gloo communicator '" << options.o.name << "' epoch "
                             << options.o.epoch << ": rank " << c->rank_ << " of " << c->size_
                             << " ready";
  return std::unique_ptr<Communicator>(std::move(c));
}

Status GlooComm::Connect() {
  // Also makes Gloo's event loop thread, created below, block SIGPIPE for good.
  SigpipeGuard sigpipe;
  RTFT_ASSIGN_OR_RETURN(const bool mesh, FullMesh(size_, opts_.o.name));
  token_.assign(16, '\0');
  if (getrandom(&token_[0], token_.size(), 0) != static_cast<ssize_t>(token_.size()))
    return Status::FromErrno(errno, "getrandom");
  std::string host = opts_.o.host;
  if (host.empty()) host = ParamString(Param::kCommGlooHost);
  if (host.empty()) host = ThisHost();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = device_->createContext(rank_, size_);
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot listen on '" + host +
                               "' (RTFT_COMM_GLOO_HOST): " + e.what());
  }
  std::vector<int> peers;
  if (mesh) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_) peers.push_back(p);
  } else {
    const int left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
    peers.push_back(left);
    if (right != left) peers.push_back(right);
  }
  RTFT_RETURN_IF_ERROR(ConnectPeers(peers, opts_.create_deadline));
  RTFT_LOG(kDebug, kLogComm) << "gloo communicator '" << opts_.o.name << "' epoch " << opts_.o.epoch
                             << ": rank " << rank_ << " connected " << peers.size() << " of "
                             << size_ - 1 << " pairs at creation ("
                             << (mesh ? "pairs all" : "pairs ring: the others at first use") << ")";
  return StartWatcher();
}

Status GlooComm::ConnectPeers(const std::vector<int>& to, Clock::time_point deadline) {
  RTFT_RETURN_IF_ERROR(Usable());
  const std::vector<int>& peers = to;
  try {
    // The listening side of a pair waits up to 5x this for its peer to connect.
    context_->setTimeout(std::max(milliseconds(1), Remaining(deadline) / 5));
    for (int p : peers) {
      context_->createPair(p);
      // From here on Abort() closes it (the only way to wake a pair that connects); a pair made
      // after an abort is closed by the destructor and never connects.
      std::lock_guard<std::mutex> lock(mu_);
      created_.insert(p);
      closable_ = true;
      if (aborted_) break;
    }
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("creating a Gloo pair: ") + e.what());
  }
  RTFT_RETURN_IF_ERROR(Usable());
  const std::string& name = opts_.o.name;
  const uint64_t epoch = opts_.o.epoch;
  // One record per pair, read by that pair's peer alone: a rank's store traffic grows with the
  // pairs it connects, not with the communicator (docs/comm.md, "Gloo at scale").
  for (int p : peers) {
    const std::vector<char> bytes = context_->getPair(p)->address().bytes();
    const json record = {{"v", kRecordVersion},
                         {"rank", rank_},
                         {"peer", p},
                         {"world", size_},
                         {"token", HexEncode(token_.data(), token_.size())},
                         {"addr", HexEncode(bytes.data(), bytes.size())}};
    RTFT_RETURN_IF_ERROR(opts_.o.store->Put(
        CommKey(epoch, name, "pair/" + std::to_string(rank_) + "/" + std::to_string(p)),
        record.dump()));
  }
  std::vector<std::vector<char>> addresses(peers.size());
  std::vector<char> client(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    RTFT_RETURN_IF_ERROR(LookUp(peers[i], deadline, &addresses[i]));
    RTFT_ASSIGN_OR_RETURN(
        const bool connects,
        ConnectingSide(context_->getPair(peers[i])->address().bytes(), addresses[i]));
    client[i] = connects;
  }
  FaultPoint("comm.gloo.connect");
  // The connecting side of a pair completes its connect() on its own (the peer's listening
  // socket exists since it published it, and Gloo's event loop accepts); the listening side
  // waits in connect() until its peer connected. So every rank connects its client sides first
  // and waits for its listening sides after: no rank waits for one that waits in turn, and the
  // pairs connect all at once, not one after the other (docs/comm.md, "Connecting").
  for (const bool clients : {true, false}) {
    for (size_t i = 0; i < peers.size(); ++i) {
      if (static_cast<bool>(client[i]) != clients) continue;
      if (aborted_) return Usable();
      try {
        context_->getPair(peers[i])->connect(addresses[i]);
      } catch (const std::exception& e) {
        if (aborted_) return Usable();
        return Status::Unavailable("connecting to rank " + std::to_string(peers[i]) + ": " +
                                   e.what());
      }
    }
  }
  if (aborted_) return Usable();
  RTFT_RETURN_IF_ERROR(SayHello(peers, deadline));
  for (int p : peers) {
    connected_[p] = 1;
    if (bye_buf_) RTFT_RETURN_IF_ERROR(Listen(p));
  }
  return Status::Ok();
}

Status GlooComm::ReachAll(const std::set<int>& peers, Clock::time_point deadline) {
  std::vector<int> missing;
  for (int p : peers)
    if (!connected_[p]) missing.push_back(p);
  return missing.empty() ? Status::Ok() : ConnectPeers(missing, deadline);
}

Status GlooComm::LookUp(int p, Clock::time_point deadline, std::vector<char>* address) {
  const std::string& name = opts_.o.name;
  const uint64_t epoch = opts_.o.epoch;
  const std::string key =
      CommKey(epoch, name, "pair/" + std::to_string(p) + "/" + std::to_string(rank_));
  StatusOr<std::string> value = Status::DeadlineExceeded("");
  while (true) {
    if (aborted_) return Usable();
    const auto slice = std::min(deadline, Clock::now() + kStoreSlice);
    value = opts_.o.store->Get(key, slice);
    if (value.ok() || value.status().code() != StatusCode::kDeadlineExceeded) break;
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded(
          "rank " + std::to_string(p) +
          " did not connect before the deadline "
          "(RTFT_COMM_CREATE_TIMEOUT_MS while the communicator is made, the call's after): is it "
          "alive, in the same epoch, and in the matching call?");
  }
  if (!value.ok()) return value.status().Annotate("looking up rank " + std::to_string(p));
  const std::string bad = "rank " + std::to_string(p) + " published a malformed record";
  if (value->size() > 16384) return Status::DataLoss(bad + " (too long)");
  const json r = json::parse(*value, nullptr, /*allow_exceptions=*/false);
  if (!r.is_object() || !r.contains("v") || !r["v"].is_number_unsigned())
    return Status::DataLoss(bad);
  if (r["v"].get<uint64_t>() != kRecordVersion)
    return Status::InvalidArgument(bad + " (record version " + r["v"].dump() +
                                   "; mixed rt-ft builds?)");
  for (const char* field : {"rank", "peer", "world"})
    if (!r.contains(field) || !r[field].is_number_integer()) return Status::DataLoss(bad);
  for (const char* field : {"token", "addr"})
    if (!r.contains(field) || !r[field].is_string()) return Status::DataLoss(bad);
  if (r["world"].get<int64_t>() != size_ || r["rank"].get<int64_t>() != p ||
      r["peer"].get<int64_t>() != rank_)
    return Status::InvalidArgument(
        "rank " + std::to_string(p) + " created communicator '" + name + "' of epoch " +
        std::to_string(epoch) + " as rank " + r["rank"].dump() + " of " + r["world"].dump() +
        " (a pair to rank " + r["peer"].dump() + "), this rank as rank " + std::to_string(rank_) +
        " of " + std::to_string(size_));
  std::vector<char> token;
  if (!HexDecode(r["token"].get<std::string>(), &token) || token.size() != 16 ||
      !HexDecode(r["addr"].get<std::string>(), address) || address->empty() ||
      address->size() > 4096)
    return Status::DataLoss(bad);
  peers_[p].token.assign(token.begin(), token.end());
  return Status::Ok();
}

// Each side proves to the other that it is the rank that published the record: a connection
// from anyone else (Gloo's listener accepts whoever comes first) fails here.
Status GlooComm::SayHello(const std::vector<int>& peers, Clock::time_point deadline) {
  std::vector<Frame> in(peers.size()), out(peers.size());
  std::vector<std::unique_ptr<Buf>> bufs;
  std::set<int> used;
  Status s;
  for (size_t i = 0; i < peers.size() && s.ok(); ++i) {
    const int p = peers[i];
    used.insert(p);
    Frame& f = out[i];
    f.op = static_cast<uint16_t>(OpKind::kHello);
    f.comm_id = comm_id_;
    f.seq = NextSendSeq(p);
    f.src = rank_;
    f.dst = p;
    PutToken(token_, &f);
    Seal(&f);
    auto rb = NewBuf(&in[i], sizeof(Frame));
    auto sb = NewBuf(&out[i], sizeof(Frame));
    if (!rb.ok() || !sb.ok()) {
      s = rb.ok() ? sb.status() : rb.status();
      break;
    }
    try {
      (*rb)->get()->recv(p, kSlotHello, 0, sizeof(Frame));
      (*sb)->get()->send(p, kSlotHello, 0, sizeof(Frame));
    } catch (const std::exception& e) {
      s = Status::Aborted(std::string("hello to rank ") + std::to_string(p) + ": " + e.what());
    }
    bufs.push_back(std::move(*rb));
    bufs.push_back(std::move(*sb));
  }
  for (size_t i = 0; i < bufs.size() && s.ok(); i += 2) {
    s = WaitRecv(bufs[i].get(), deadline);
    if (s.code() == StatusCode::kDeadlineExceeded)
      s = Status::DeadlineExceeded(
          "a connection was made but no hello came before the deadline (a stray connection "
          "took a rank's place?)");
  }
  for (size_t i = 0; i < peers.size() && s.ok(); ++i) {
    const int p = peers[i];
    FrameExpect e;
    e.comm_id = comm_id_;
    e.seq = NextRecvSeq(p);
    e.op = OpKind::kHello;
    e.src = p;
    e.dst = rank_;
    s = CheckHello(in[i], e, peers_[p].token);
  }
  for (size_t i = 1; i < bufs.size() && s.ok(); i += 2) s = WaitSend(bufs[i].get(), deadline);
  if (!s.ok()) return Break(s, used);
  return Status::Ok();
}

}  // namespace gloo_backend
}  // namespace rtft::comm
