#include "launcher/train_run.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

// A small model: a run takes a few seconds on two cores.
const std::vector<std::string> kTrain = {"--steps", "16", "--hidden",    "192",
                                         "--batch", "8",  "--log-every", "100"};

}  // namespace

size_t TrainRun::Count(const std::string& text) const {
  size_t n = 0;
  for (size_t at = output.find(text); at != std::string::npos; at = output.find(text, at + 1)) ++n;
  return n;
}

std::set<int> FiredSlots(const std::string& dir) {
  std::set<int> slots;
  std::ifstream in(dir + "/faults.log");
  std::string word;
  while (in >> word)
    if (word.rfind("slot=", 0) == 0) slots.insert(std::atoi(word.c_str() + 5));
  return slots;
}

std::set<int> LoseFiredSlots(Job& job, const std::string& dir, int n) {
  std::set<int> slots;
  EXPECT_TRUE(WaitFor(
      [&] {
        slots = FiredSlots(dir);
        return static_cast<int>(slots.size()) >= n;
      },
      seconds(60)))
      << job.Output();
  for (int slot : slots) {
    const pid_t agent = job.AgentOf(slot);
    EXPECT_GT(agent, 0) << "slot " << slot;
    if (agent > 0) kill(agent, SIGKILL);
  }
  return slots;
}

bool WaitFault(const std::string& dir, int slot, const std::string& point) {
  const std::string name = point.substr(0, point.find('@'));
  return WaitFor(
      [&] {
        std::ifstream in(dir + "/faults.log");
        std::string line;
        while (std::getline(in, line))
          if (line.find("fault " + name + " ") != std::string::npos &&
              line.find(" slot=" + std::to_string(slot) + " ") != std::string::npos)
            return true;
        return false;
      },
      seconds(60));
}

std::vector<pid_t> SlotProcesses(const std::string& dir, int slot, bool agent_only) {
  std::vector<pid_t> pids;
  const std::string s = std::to_string(slot);
  for (const ProcInfo& p : JobProcesses(dir)) {
    const bool agent = p.comm.rfind("dp-launch", 0) == 0 && p.Env("OMPI_COMM_WORLD_RANK") == s;
    const bool other = p.Env("OMPI_COMM_WORLD_RANK") == s || p.Env("RTFT_SLOT") == s;
    if (agent || (!agent_only && other)) pids.push_back(p.pid);
  }
  return pids;
}

size_t SignalSlot(const std::string& dir, int slot, int sig, bool agent_only) {
  std::vector<pid_t> pids = SlotProcesses(dir, slot, agent_only);
  // Children (started later: higher pids, mostly) first, so that one's death does not make the
  // next kill() miss.
  std::sort(pids.rbegin(), pids.rend());
  size_t n = 0;
  for (pid_t pid : pids) n += kill(pid, sig) == 0 ? 1 : 0;
  return n;
}

bool WaitOutput(const Job& job, const std::string& text) {
  return WaitFor([&] { return job.Output().find(text) != std::string::npos; }, seconds(60));
}

void TrainRunTest::SetUp() {
  char tmpl[] = "/tmp/rtft-train-job-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  root_ = tmpl;
}

void TrainRunTest::TearDown() {
  if (!HasFailure()) {
    std::error_code e;
    std::filesystem::remove_all(root_, e);
  }
}

TrainRun TrainRunTest::Start(const std::string& name, const TrainSpec& t) {
  TrainRun run;
  run.dir = root_ + "/" + name;
  std::filesystem::create_directories(run.dir);
  Job job(run.dir);
  JobSpec spec;
  spec.slots = t.active + t.spares + (t.dedicated ? 1 : 0);
  // A 1 s heartbeat timeout: two of these jobs share two cores under ctest -j2, and a slot
  // starved for half a second would be declared lost in the middle of a planned fault.
  spec.dp_args = {"--spares", std::to_string(t.spares), "--heartbeat-ms",
                  "100",      "--heartbeat-timeout-ms", "1000"};
  if (t.dedicated) spec.dp_args.insert(spec.dp_args.end(), {"--coordinator-slot", "dedicated"});
  spec.dp_args.insert(spec.dp_args.end(), t.dp_extra.begin(), t.dp_extra.end());
  spec.app = {RTFT_TEST_APP};
  // kTrain's options, unless train_extra gives them another value.
  for (size_t i = 0; i + 1 < kTrain.size(); i += 2)
    if (std::find(t.train_extra.begin(), t.train_extra.end(), kTrain[i]) == t.train_extra.end())
      spec.app.insert(spec.app.end(), {kTrain[i], kTrain[i + 1]});
  if (!t.faults.empty()) spec.app.insert(spec.app.end(), {"--fault", t.faults});
  spec.app.insert(spec.app.end(), t.train_extra.begin(), t.train_extra.end());
  spec.env = {{"RTFT_FAULT_LOG", run.dir + "/faults.log"}, {"RTFT_COMM_GLOO_HOST", "127.0.0.1"}};
  for (const auto& [k, v] : t.env) spec.env[k] = v;
  job.Start(spec);
  if (t.during) t.during(job, run.dir);
  auto rc = job.Wait(t.limit);
  run.ended = rc.has_value();
  EXPECT_TRUE(run.ended) << "the job did not end; left:\n" << job.leftovers() << job.Output();
  run.leftovers = job.leftovers();
  run.exit_code = job.JobExitCode();
  run.output = job.Output();
  ReadTrainOutput(run.output, &run.digests, &run.recoveries);
  return run;
}

const std::string& TrainRunTest::Reference(int active, const std::vector<std::string>& extra) {
  std::string key = std::to_string(active);
  for (const std::string& e : extra) key += " " + e;
  auto it = reference_.find(key);
  if (it != reference_.end()) return it->second;
  TrainSpec spec;
  spec.active = active;
  spec.spares = 0;
  spec.train_extra = extra;
  TrainRun ok = Start("reference" + std::to_string(reference_.size()), spec);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(ok.digests.size(), static_cast<size_t>(active)) << ok.output;
  std::set<std::string> distinct;
  for (const auto& [r, d] : ok.digests) distinct.insert(d);
  EXPECT_EQ(distinct.size(), 1u) << ok.output;
  return reference_[key] = ok.digests.empty() ? "" : ok.digests.begin()->second;
}

void TrainRunTest::ExpectIdentical(const TrainRun& run, int active, const std::string& what,
                                   const std::vector<std::string>& extra) {
  const std::string& want = Reference(active, extra);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(run.exit_code, 0) << what << "\n" << run.output;
  EXPECT_EQ(run.leftovers, "") << what << ": processes outlived the launcher\n" << run.output;
  EXPECT_EQ(run.digests.size(), static_cast<size_t>(active)) << what << "\n" << run.output;
  for (const auto& [rank, digest] : run.digests)
    EXPECT_EQ(digest, want) << what << ": rank " << rank << "\n" << run.output;
}

}  // namespace rtft::launch::test
