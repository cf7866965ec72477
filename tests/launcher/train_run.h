// Test support for the coordinator tests: jobs of rtft-train under `mpirun --enable-recovery
// dp-launch` (launch_job.h): a fixture that starts a run with a rank failing at a named fault
// point, lets the test act while it runs (lose the slots where a point fired, stop and resume
// processes), and collects what every rank printed: its final digest (`[train R] done ...
// digest=...`), its recoveries, and dp-launch's lines about the coordinators. A run's digests are
// compared with those of the same run without a failure, computed once per configuration.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"

namespace rtft::launch::test {

struct TrainSpec {
  int active = 4;  // ranks
  int spares = 1;
  // --coordinator-slot dedicated: one more slot, slot 0, that runs only the coordinator.
  bool dedicated = false;
  std::string faults;                    // rtft-train --fault RANK:point@n:action,...
  std::vector<std::string> dp_extra;     // more dp-launch options
  std::vector<std::string> train_extra;  // more (or other) rtft-train options
  std::map<std::string, std::string> env;
  int heartbeat_ms = 50;
  int heartbeat_timeout_ms = 500;
  // Called once the job started, before the test waits for its end.
  std::function<void(Job& job, const std::string& dir)> during;
  std::chrono::seconds limit{120};
};

struct TrainRun {
  std::string dir;
  std::string output;  // mpirun's stdout and stderr
  int exit_code = -1;  // what --exit-code-file holds
  bool ended = false;  // the launcher returned within the limit
  std::string leftovers;
  std::map<int, std::string> digests;  // rank -> digest
  int recoveries = 0;                  // `[train R] recovered` lines
  // Number of times `text` occurs in the output.
  size_t Count(const std::string& text) const;
};

// The slots (as dp-launch numbers them) whose process noted a fired fault point in `dir`'s
// faults.log.
std::set<int> FiredSlots(const std::string& dir);
// Waits until points fired on `n` slots, then SIGKILLs each of those slots' dp-launch (and so its
// application): lost nodes. Returns the slots.
std::set<int> LoseFiredSlots(Job& job, const std::string& dir, int n);
// Waits (60 s at most) until `point` fired on `slot`.
bool WaitFault(const std::string& dir, int slot, const std::string& point);
// The live processes of `slot` in `dir`'s job: its dp-launch and keeper (the launcher's rank
// variable) and its application (RTFT_SLOT); `agent_only`: the dp-launch alone.
std::vector<pid_t> SlotProcesses(const std::string& dir, int slot, bool agent_only);
// Sends `sig` to each of them; returns how many.
size_t SignalSlot(const std::string& dir, int slot, int sig, bool agent_only);
// Waits (60 s at most) until the launcher's output holds `text`.
bool WaitOutput(const Job& job, const std::string& text);

class TrainRunTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  TrainRun Start(const std::string& name, const TrainSpec& spec);
  // The digest every rank of the failure-free run of `active` ranks with `extra` rtft-train
  // options ends with (run once per configuration).
  const std::string& Reference(int active, const std::vector<std::string>& extra = {});
  // The run finished (exit code 0), every rank with the failure-free digest.
  void ExpectIdentical(const TrainRun& run, int active, const std::string& what,
                       const std::vector<std::string>& extra = {});

  std::string root_;
  // Shared by the tests of a binary: each configuration's reference runs once.
  static inline std::map<std::string, std::string> reference_;
};

}  // namespace rtft::launch::test
