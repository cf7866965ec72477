// The Gloo backend against a stranger: a connection to a rank's port while the communicator is
// being made, bytes that are not Gloo's on it; ranks being threads of this process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "comm/comm_test_util.h"

namespace rtft::comm::test {
namespace {

using std::chrono::milliseconds;

// A store that, once both ranks have published (one pair, a record each), lets a stranger connect
// to every published port and send bytes that are not Gloo's before either rank may read the
// other's record.
class StrangerStore : public CommStore {
 public:
  Status Put(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_[key] = value;
      if (records_.size() == 2) Intrude();
      cv_.notify_all();
    }
    return inner_->Put(key, value);
  }
  StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return intruded_; }))
      return Status::DeadlineExceeded("waiting for the stranger");
    lock.unlock();
    return inner_->Get(key, deadline);
  }
  ~StrangerStore() override {
    for (int fd : fds_) close(fd);
  }
  int connected() const { return connected_; }

 private:
  void Intrude() {
    for (const auto& [key, value] : records_) {
      auto r = nlohmann::json::parse(value);
      for (const auto& a : {r["addr"]}) {
        std::vector<char> bytes;
        if (!HexDecodeForTest(a.get<std::string>(), &bytes) || bytes.size() < sizeof(sockaddr_in))
          continue;
        sockaddr_storage ss;
        std::memcpy(&ss, bytes.data(), std::min(bytes.size(), sizeof(ss)));
        const int fd = socket(ss.ss_family, SOCK_STREAM, 0);
        if (fd < 0) continue;
        if (connect(fd, reinterpret_cast<sockaddr*>(&ss), sizeof(sockaddr_in)) == 0) {
          ++connected_;
          std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
          junk.append(4096, '\xab');
          (void)!write(fd, junk.data(), junk.size());
        }
        fds_.push_back(fd);
      }
    }
    intruded_ = true;
  }
  static bool HexDecodeForTest(const std::string& h, std::vector<char>* out) {
    out->clear();
    for (size_t i = 0; i + 1 < h.size(); i += 2)
      out->push_back(std::stoi(h.substr(i, 2), nullptr, 16));
    return true;
  }
  std::unique_ptr<CommStore> inner_ = NewLocalCommStore();
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> records_;
  bool intruded_ = false;
  std::vector<int> fds_;
  int connected_ = 0;
};

TEST(CommStrayConnectionTest, AStrayConnectionToARanksPortCannotCrashOrJoin) {
  RTFT_REQUIRE_GLOO();
  StrangerStore store;
  std::vector<Status> got(2);
  RunRanks(2, [&](int r) {
    CommOptions o = Options(r, 2, &store, 1, "stray");
    o.create_timeout = milliseconds(1500);
    got[r] = Communicator::Create(o).status();
  });
  ASSERT_GE(store.connected(), 1) << "the stranger reached no port";
  // The stranger took a listener's place: creation fails on both ranks, and says why.
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(got[r].ok()) << "rank " << r;
  // The process survived, and the next epoch works.
  auto clean = NewLocalCommStore();
  auto comms = CreateAll(2, clean.get(), 2, "stray");
  ASSERT_TRUE(comms[0] && comms[1]);
  // Once connected, the ports are closed to strangers: a connection is refused, and the
  // communicator is unaffected.
  std::vector<float> in(1000, 1.0f), out0(1000), out1(1000);
  RunRanks(2, [&](int r) {
    EXPECT_TRUE(comms[r]
                    ->AllReduce(in.data(), r ? out1.data() : out0.data(), 1000, DType::kFloat32,
                                ReduceOp::kSum)
                    .ok());
  });
  EXPECT_EQ(out0[0], 2.0f);
}

}  // namespace
}  // namespace rtft::comm::test
