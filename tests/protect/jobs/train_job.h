// The fixture of the hot-swap job tests: `mpirun --enable-recovery dp-launch --spares S --
// rtft-train` with ranks failing at named phases (docs/testing.md), a crashed application
// restarted on its slot or a whole slot SIGKILLed, and each run's digests compared with those of
// the same run without the failure, bit for bit.
#pragma once

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {

using std::chrono::seconds;

// A fixture that runs rtft-train jobs and compares their digests. `train` gives the trainer's
// options every job starts from (a job's own override them), `heartbeat_timeout_ms` dp-launch's.
class TrainJobTest : public ::testing::Test {
 protected:
  TrainJobTest(std::vector<std::string> train, int heartbeat_timeout_ms)
      : train_(std::move(train)), heartbeat_timeout_ms_(heartbeat_timeout_ms) {}

  void SetUp() override {
    char tmpl[] = "/tmp/rtft-protect-job-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    if (!HasFailure()) {
      std::error_code e;
      std::filesystem::remove_all(root_, e);
    }
  }

  struct Run {
    std::string dir;
    std::string output;
    int exit_code = -1;
    std::map<int, std::string> digests;  // rank -> digest
    int recoveries = 0;
  };

  // One job of `active` ranks and `spares` spares. `faults` arms named points per rank (rank:
  // point@n:action); the first `lose` slots whose point fires (a hang) are SIGKILLed, agent and
  // all, as lost nodes, once `ready_to_kill` holds too (a condition of the job's files: an L3
  // version committed in the background while the ranks hang, say). `then` runs once they are
  // killed, before the job's end is awaited (a later loss).
  Run Start(const std::string& name, int active, int spares, const std::string& faults, int lose,
            const std::vector<std::string>& train_extra = {},
            const std::vector<std::string>& dp_extra = {},
            const std::function<bool()>& ready_to_kill = nullptr,
            const std::function<void(Job&)>& then = nullptr) {
    Run run;
    run.dir = root_ + "/" + name;
    std::filesystem::create_directories(run.dir);
    Job job(run.dir);
    JobSpec spec;
    spec.slots = active + spares;
    spec.dp_args = {"--spares",
                    std::to_string(spares),
                    "--heartbeat-ms",
                    std::to_string(heartbeat_timeout_ms_ / 10),
                    "--heartbeat-timeout-ms",
                    std::to_string(heartbeat_timeout_ms_)};
    spec.dp_args.insert(spec.dp_args.end(), dp_extra.begin(), dp_extra.end());
    // RTFT_TEST_APP overrides the built trainer's path (a bundle on another machine).
    const char* app = std::getenv("RTFT_TEST_APP");
    spec.app = {app && *app ? app : RTFT_TEST_APP};
    // The fixture's options, unless train_extra gives them another value.
    for (size_t i = 0; i + 1 < train_.size(); i += 2)
      if (std::find(train_extra.begin(), train_extra.end(), train_[i]) == train_extra.end())
        spec.app.insert(spec.app.end(), {train_[i], train_[i + 1]});
    if (!faults.empty()) spec.app.insert(spec.app.end(), {"--fault", faults});
    spec.app.insert(spec.app.end(), train_extra.begin(), train_extra.end());
    spec.env = {{"RTFT_FAULT_LOG", run.dir + "/faults.log"}, {"RTFT_COMM_GLOO_HOST", "127.0.0.1"}};
    for (const auto& [k, v] : env_) spec.env[k] = v;
    job.Start(spec);
    if (lose > 0) {
      std::set<int> slots;
      EXPECT_TRUE(WaitFor(
          [&] {
            std::ifstream in(run.dir + "/faults.log");
            std::string word;
            while (in >> word)
              if (word.rfind("slot=", 0) == 0) slots.insert(std::atoi(word.c_str() + 5));
            return static_cast<int>(slots.size()) >= lose;
          },
          seconds(60)))
          << job.Output();
      if (ready_to_kill) EXPECT_TRUE(WaitFor(ready_to_kill, seconds(60))) << job.Output();
      for (int slot : slots) {
        const pid_t agent = job.AgentOf(slot);
        EXPECT_GT(agent, 0) << "slot " << slot;
        if (agent > 0) kill(agent, SIGKILL);
      }
    }
    if (then) then(job);
    auto rc = job.Wait(seconds(120));
    EXPECT_TRUE(rc.has_value()) << "the job did not end\n" << job.Output();
    run.exit_code = job.JobExitCode();
    run.output = job.Output();
    ReadTrainOutput(run.output, &run.digests, &run.recoveries);
    return run;
  }

  // Waits for `slot`'s fault point to fire (it logs slot=S), then SIGKILLs the slot's agent.
  static void LoseSlotAtItsFault(Job& job, const std::string& dir, int slot,
                                 const std::function<bool()>& ready = nullptr) {
    const std::string mark = "slot=" + std::to_string(slot);
    EXPECT_TRUE(WaitFor(
        [&] {
          std::ifstream in(dir + "/faults.log");
          std::string word;
          while (in >> word)
            if (word == mark) return true;
          return false;
        },
        seconds(60)))
        << job.Output();
    if (ready) EXPECT_TRUE(WaitFor(ready, seconds(60))) << job.Output();
    const pid_t agent = job.AgentOf(slot);
    EXPECT_GT(agent, 0) << "slot " << slot;
    if (agent > 0) kill(agent, SIGKILL);
  }

  // Whether the checkpoint directory's LATEST names version `version` or a newer one.
  static bool CommittedAtLeast(const std::string& ckpt, uint64_t version) {
    std::ifstream in(ckpt + "/LATEST");
    uint64_t v = 0;
    return static_cast<bool>(in >> v) && v >= version;
  }

  // The digest of the failure-free run of `active` ranks with `extra` options, computed once for
  // every test of the binary that runs the same job: the same options, the fixture's and the
  // extra ones, and the same environment (a test's env_ as it is now).
  const std::string& Reference(int active, const std::vector<std::string>& extra = {}) {
    std::string key = std::to_string(active) + " |";
    for (const std::string& e : train_) key += " " + e;
    key += " |";
    for (const std::string& e : extra) key += " " + e;
    key += " |";
    for (const auto& [k, v] : env_) key += " " + k + "=" + v;
    std::map<std::string, std::string>& reference = References();
    auto it = reference.find(key);
    if (it != reference.end()) return it->second;
    Run ok = Start("reference" + std::to_string(reference.size()), active, 0, "", 0, extra);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_EQ(ok.digests.size(), static_cast<size_t>(active)) << ok.output;
    std::set<std::string> distinct;
    for (const auto& [r, d] : ok.digests) distinct.insert(d);
    EXPECT_EQ(distinct.size(), 1u) << ok.output;
    return reference[key] = ok.digests.empty() ? "" : ok.digests.begin()->second;
  }
  static std::map<std::string, std::string>& References() {
    static std::map<std::string, std::string> references;  // key: Reference's
    return references;
  }

  void ExpectIdentical(const Run& run, int active, const std::string& what,
                       const std::vector<std::string>& extra = {}) {
    const std::string& want = Reference(active, extra);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(run.exit_code, 0) << what << "\n" << run.output;
    EXPECT_EQ(run.digests.size(), static_cast<size_t>(active)) << what << "\n" << run.output;
    for (const auto& [rank, digest] : run.digests)
      EXPECT_EQ(digest, want) << what << ": rank " << rank << "\n" << run.output;
    EXPECT_GE(run.recoveries, active - 1) << what << ": no recovery happened\n" << run.output;
  }

  // A run that shrank from 4 ranks to 3 (from memory, L1 and L2; `source` "l3": from an L3
  // version) ends with the digest of a run of four ranks told to shrink at the step recovery
  // rolled back to: four ranks to that step (its L3 version), then three from there.
  void ExpectShrunkLikeARunToldToShrink(const Run& run, const std::string& name,
                                        const std::vector<std::string>& extra = {},
                                        const std::string& source = "l1") {
    EXPECT_EQ(run.exit_code, 0) << run.output;
    ASSERT_EQ(run.digests.size(), 3u) << run.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        run.output, m,
        std::regex(R"(recovered epoch=\d+ step=(\d+) world=3 source=)" + source + " ")))
        << run.output;
    const std::string step = m[1];
    ASSERT_GT(std::stoi(step), 0) << run.output;
    const std::string ckpt = root_ + "/" + name + "-reference";
    std::vector<std::string> first = {
        "--steps", std::to_string(std::stoi(step) + 1), "--l3-every", step, "--ckpt-dir", ckpt};
    first.insert(first.end(), extra.begin(), extra.end());
    Run before = Start(name + "-ref-4", 4, 0, "", 0, first);
    EXPECT_EQ(before.exit_code, 0) << before.output;
    std::vector<std::string> second = {"--ckpt-dir", ckpt};
    second.insert(second.end(), extra.begin(), extra.end());
    Run after = Start(name + "-ref-3", 3, 0, "", 0, second);
    EXPECT_EQ(after.exit_code, 0) << after.output;
    EXPECT_NE(after.output.find("restored step " + step + " from the L3 checkpoint"),
              std::string::npos)
        << after.output;
    ASSERT_EQ(after.digests.size(), 3u) << after.output;
    const std::string want = after.digests.begin()->second;
    for (const auto& [rank, digest] : run.digests) EXPECT_EQ(digest, want) << "rank " << rank;
    // Not the digest of the four-rank run: the shrink changed the result as a shrink should.
    EXPECT_NE(want, Reference(4, extra));
  }

  std::vector<std::string> train_;
  int heartbeat_timeout_ms_;
  std::map<std::string, std::string> env_;  // added to every job's environment from now on
  std::string root_;
};

#ifdef RTFT_CKPT
// What `rtft-ckpt ARGS` prints, stderr too (the tests that read back their L3 versions).
inline std::string Ckpt(const std::string& args) {
  const std::string cmd = std::string(RTFT_CKPT) + " " + args + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}
#endif

}  // namespace rtft::launch::test
