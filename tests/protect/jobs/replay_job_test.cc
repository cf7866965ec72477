// The replay of a step by a peer, end to end (docs/protect.md, "Replay"): `mpirun
// --enable-recovery dp-launch --spares 1 -- rtft-train` under RTFT_PROTECT_REPLAY_EVERY, where one
// rank flips a bit of its own gradients before the reduction (`train.grad_flip`: a faulty SM).
// The replicated copies would agree on the result (the reduction spreads it to every rank): only
// the replay sees it. Once, it is a transient fault and the step goes on with the right
// gradients; at every step, the rank is taken for a faulty device and a spare takes it. Every run
// ends with the digest of the run without the flip, bit for bit; without the replay the same flip
// changes the result. The check for non-finite gradients: a NaN once, a NaN at every step, and a
// NaN that replays make too (the model's own: the run ends, no device blamed).
#include <iterator>
#include <sstream>

#include "protect/jobs/train_job.h"
#include "rtft/checkpoint.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kTrain = {"--steps", "80", "--hidden",    "128",
                                         "--batch", "8",  "--log-every", "1000"};

class ReplayJobTest : public TrainJobTest {
 protected:
  ReplayJobTest() : TrainJobTest(kTrain, 1000) {}

  // `pattern` (its first group a step) matches the output `ranks` times, each time with `step`.
  static void ExpectEachRank(const Run& run, int ranks, const std::string& pattern,
                             const std::string& step) {
    const std::regex line(pattern);
    int seen = 0;
    for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), line);
         it != std::sregex_iterator(); ++it, ++seen)
      EXPECT_EQ((*it)[1].str(), step) << run.output;
    EXPECT_EQ(seen, ranks) << run.output;
  }
  static constexpr const char* kRestoredFromL3 = "restored step ([0-9]+) from the L3 checkpoint";

  // Every rank ended with the reference's digest, with no recovery.
  void ExpectSameWithoutRecovery(const Run& run) {
    const std::string& want = Reference(3);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(run.exit_code, 0) << run.output;
    ASSERT_EQ(run.digests.size(), 3u) << run.output;
    for (const auto& [rank, digest] : run.digests) EXPECT_EQ(digest, want) << rank << run.output;
    EXPECT_EQ(run.recoveries, 0) << run.output;
  }
};

// Replaying every step changes nothing: the same bits as the run without it.
TEST_F(ReplayJobTest, ACleanRunReplayedAtEveryStepEndsTheSame) {
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "1";
  Run run = Start("clean", 3, 1, "", 0);
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  ExpectSameWithoutRecovery(run);
  EXPECT_EQ(run.output.find("silent data corruption"), std::string::npos) << run.output;
}

// The flip, once: rank 1's gradients differ from its replay by rank 2; its second run agrees
// with the replay, and the step goes on with the right gradients (nothing runs again).
TEST_F(ReplayJobTest, AFlippedGradientIsCaughtBeforeTheReduction) {
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "1";
  Run run = Start("flip-once", 3, 1, "1:train.grad_flip@30:flag", 0);
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  ExpectSameWithoutRecovery(run);
  EXPECT_NE(run.output.find("the gradients of data-parallel rank 1 differ from its replay by "
                            "rank 2; its second run agrees with the replay: a transient fault"),
            std::string::npos)
      << run.output;
}

// The flip at every step from the 30th: rank 1 disagrees twice, its slot is retired as a faulty
// device and the spare takes its rank from the last snapshot.
TEST_F(ReplayJobTest, ARankThatFlipsAtEveryStepIsReplacedByTheSpare) {
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "1";
  Run run = Start("flip-always", 3, 1, "1:train.grad_flip@30:flags", 0);
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  ExpectIdentical(run, 3, "a faulty device");
  EXPECT_NE(run.output.find("its second run disagrees too: its device is taken for faulty"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("slot 1 (rank 1): device error, slot retired; rank 1 -> spare slot 3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
}

// A device that goes faulty between two replays: its wrong gradients of the steps that were not
// replayed (from about step 30, the replay every 4 steps) already changed the state when the replay
// of step 32 finds it. The recovery goes back no further than the newest state the replays vouch
// for, the one step 28's replayed update made: memory (two steps) no longer holds step 29, so the
// newest complete L3 version at or before it that the leader finds (a version every 4 steps: 28,
// or an older one while 28's commit is still on its way), which every rank restores; the spare
// takes rank 1 and the run ends with the failure-free digest. Without the ceiling the recovery
// would restore step 32, which holds the wrong gradients.
TEST_F(ReplayJobTest, AFaultyDeviceFoundBetweenReplaysGoesBackToAReplayedL3Version) {
  const std::string ckpt = root_ + "/l3-ckpt";
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "4";
  Run run = Start("late-l3", 3, 1, "1:train.grad_flip@31:flags", 0,
                  {"--l3-every", "4", "--ckpt-dir", ckpt});
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  ExpectIdentical(run, 3, "a faulty device found by the replay after steps that were not");
  EXPECT_NE(run.output.find("its second run disagrees too: its device is taken for faulty"),
            std::string::npos)
      << run.output;
  std::smatch chosen;
  ASSERT_TRUE(
      std::regex_search(run.output, chosen,
                        std::regex("the steps after step 29 were not replayed: memory holds "
                                   "no step that old; the recovery goes back to L3 "
                                   "version ([0-9]+)")))
      << run.output;
  const std::string version = chosen[1];
  EXPECT_EQ(std::stoi(version) % 4, 0) << version;
  EXPECT_LE(std::stoi(version), 28);
  // Every rank restored that very version.
  ExpectEachRank(run, 3, kRestoredFromL3, version);
  // The versions the run wrote again after it went back hold this run's files only (each epoch's
  // engines commit only their own write's files, docs/format.md "Commit protocol"): every
  // complete one verifies.
  const auto versions = ListVersions(ckpt);
  ASSERT_TRUE(versions.ok()) << versions.status();
  for (const VersionInfo& v : *versions) {
    if (!v.complete) continue;
    const Status verified = VerifyVersion(ckpt, v.version);
    EXPECT_TRUE(verified.ok()) << "version " << v.version << ": " << verified;
  }
}

// The rollback withdraws the L3 versions it cannot vouch for (docs/protect.md, "Replay"): L3 every
// 2 steps, so version 30 is committed (LATEST 30) when the flip is found in step 32, or its commit
// ends after the recovery began. With rank 0 held at its first update after the recovery, before
// the run writes any version after step 29 again, LATEST comes to name a version at or before
// step 29 and no complete version is newer; the whole job killed there and started again resumes
// from such a version and ends with the failure-free digest.
TEST_F(ReplayJobTest, AFaultyDevicesRollbackWithdrawsTheL3VersionsItCannotVouchFor) {
  const std::string ckpt = root_ + "/l3-withdrawn";
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "4";
  std::string held;  // what the directory said while rank 0 was held
  // Rank 0 updates steps 0 to 31 (32 updates); the flip is found in step 32, before its update;
  // its 33rd update is the first after the recovery.
  Run died = Start("withdrawn-1", 3, 1, "1:train.grad_flip@31:flags,0:protect.update@33:hang", 0,
                   {"--l3-every", "2", "--ckpt-dir", ckpt}, {}, nullptr, [&](Job& job) {
                     EXPECT_TRUE(WaitFor(
                         [&] {
                           std::ifstream in(root_ + "/withdrawn-1/faults.log");
                           const std::string log((std::istreambuf_iterator<char>(in)), {});
                           return log.find("protect.update") != std::string::npos &&
                                  job.Output().find("recovered epoch=2") != std::string::npos;
                         },
                         seconds(60)))
                         << job.Output();
                     // The second pass runs once the retired engine is gone (its commit of version
                     // 30 may move LATEST after the first): waited for, not assumed.
                     const bool withdrawn = WaitFor(
                         [&] {
                           const auto latest = LatestVersion(ckpt);
                           held = "LATEST " + (latest.ok() ? std::to_string(*latest)
                                                           : latest.status().ToString());
                           const auto versions = ListVersions(ckpt);
                           if (!latest.ok() || *latest > 29 || !versions.ok()) return false;
                           for (const VersionInfo& v : *versions)
                             if (v.complete && v.version > 29) return false;
                           return true;
                         },
                         seconds(30));
                     EXPECT_TRUE(withdrawn) << held << "\n" << job.Output();
                     for (int slot = 0; slot < 4; ++slot)
                       if (const pid_t agent = job.AgentOf(slot); agent > 0) kill(agent, SIGKILL);
                   });
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  // Version 30 was withdrawn, whichever pass found it complete, with those after the version the
  // job went back to (28, or an older one while 28's commit was on its way).
  std::smatch withdrawn;
  ASSERT_TRUE(std::regex_search(
      died.output, withdrawn,
      std::regex("L3: versions after step ([0-9]+) withdrawn \\(([0-9, ]*\\b30)\\)")))
      << died.output;
  EXPECT_LE(std::stoi(withdrawn[1]), 29) << withdrawn[0];
  Run again = Start("withdrawn-2", 3, 1, "", 0, {"--l3-every", "4", "--ckpt-dir", ckpt});
  std::smatch restored;
  ASSERT_TRUE(std::regex_search(again.output, restored, std::regex(kRestoredFromL3)))
      << again.output;
  EXPECT_LE(std::stoi(restored[1]), 29) << held;
  ExpectIdentical(again, 3, "started again after the rollback withdrew the versions after 29");
}

// The same with the replay every 2 steps: the newest state the replays vouch for is step 31's
// (step 30 was replayed), which memory still holds: every rank resumes at step 31, never 32 (the
// log names the ceiling when it changed the plan; step 32's replicas may not be whole yet anyway,
// so without the ceiling this case fails only when they are: the L3 case above fails every time).
TEST_F(ReplayJobTest, AFaultyDeviceFoundBetweenReplaysGoesBackToAReplayedStepInMemory) {
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "2";
  Run run = Start("late-l1", 3, 1, "1:train.grad_flip@32:flags", 0);
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  ExpectIdentical(run, 3, "a faulty device found by the replay after a step that was not");
  ExpectEachRank(run, 3, "\\] recovered epoch=[0-9]+ step=([0-9]+) ", "31");
}

// The same with no spare (--on-spares-exhausted shrink): the shrink goes back as a recovery does,
// to step 31, and the three ranks left end with the digest of a run of four ranks told to shrink
// at that step. Without the ceiling the shrink would go on from step 32, or from the newest state
// whose replicas are whole.
TEST_F(ReplayJobTest, AShrinkAfterAFaultyDeviceGoesBackToAReplayedStep) {
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "2";
  Run run = Start("late-shrink", 4, 0, "1:train.grad_flip@32:flags", 0, {},
                  {"--on-spares-exhausted", "shrink"});
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  EXPECT_NE(run.output.find("its second run disagrees too: its device is taken for faulty"),
            std::string::npos)
      << run.output;
  ExpectEachRank(run, 3, "\\] recovered epoch=[0-9]+ step=([0-9]+) world=3 ", "31");
  ExpectShrunkLikeARunToldToShrink(run, "late-shrink");
}

// And where memory no longer holds that step (the replay every 4 steps, L3 every 4): the three
// ranks restore the newest complete L3 version at or before step 29 that the leader found, into
// the smaller world. Without the ceiling the shrink would go on from step 32 or 33 in memory.
TEST_F(ReplayJobTest, AShrinkAfterAFaultyDeviceGoesBackToAReplayedL3Version) {
  const std::string ckpt = root_ + "/shrink-l3-ckpt";
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "4";
  Run run = Start("late-shrink-l3", 4, 0, "1:train.grad_flip@31:flags", 0,
                  {"--l3-every", "4", "--ckpt-dir", ckpt}, {"--on-spares-exhausted", "shrink"});
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  std::smatch chosen;
  ASSERT_TRUE(std::regex_search(
      run.output, chosen,
      std::regex("the steps after step 29 were not replayed: memory holds no step that old; "
                 "the shrink goes back to L3 version ([0-9]+)")))
      << run.output;
  EXPECT_LE(std::stoi(chosen[1].str()), 28);
  ExpectEachRank(run, 3, kRestoredFromL3, chosen[1].str());
  ExpectShrunkLikeARunToldToShrink(run, "late-shrink-l3", {}, "l3");
}

// L3's manifests say which versions were replayed (docs/format.md, "Certification"): a version
// whose own step (the compute run from it) was replayed by a peer and agreed; with the replay every
// 4 steps and a version every 2, every other version. `rtft-ckpt ls` and `verify` show it.
TEST_F(ReplayJobTest, L3MarksTheVersionsWhoseStepWasReplayed) {
  const std::string ckpt = root_ + "/l3-ckpt";
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "4";
  env_["RTFT_CKPT_KEEP_VERSIONS"] = "0";  // every version stays on disk
  Run run = Start("l3-marks", 3, 1, "", 0, {"--l3-every", "2", "--ckpt-dir", ckpt});
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  env_.erase("RTFT_CKPT_KEEP_VERSIONS");
  ExpectSameWithoutRecovery(run);
  const std::string ls = Ckpt("ls '" + ckpt + "'");
  std::istringstream lines(ls);
  std::string line;
  size_t replayed = 0, not_replayed = 0;
  while (std::getline(lines, line)) {
    if (line.find(" complete ") == std::string::npos) continue;
    const uint64_t version = std::stoull(line);
    const bool marked = line.find(",replayed") != std::string::npos;
    EXPECT_EQ(marked, version % 4 == 0) << line << "\n" << ls;
    ++(marked ? replayed : not_replayed);
  }
  EXPECT_GE(replayed, 15u) << ls;  // versions 4, 8, ..., 76 (80 steps)
  EXPECT_GE(not_replayed, 15u) << ls;
  EXPECT_NE(Ckpt("verify '" + ckpt + "' --version 40").find("its compute checked by a replay"),
            std::string::npos);
  EXPECT_NE(Ckpt("verify '" + ckpt + "' --version 42").find("its compute not replayed"),
            std::string::npos);
}

// A job started again under RTFT_PROTECT_RESUME_FROM=replayed resumes from the newest version
// whose step a replay checked, not from the one LATEST names (docs/protect.md, "A job started
// again"): the first run, replaying every 4 steps with a version every 2, ends after step 42,
// whose version (the newest) was not replayed; the second resumes every rank from 40, withdraws
// 42 and ends with the failure-free digest. A directory without a replayed version, and a value
// the setting does not know, end the job before it starts, with the reason; `agreed` resumes that
// directory from its newest version, whose copies were compared.
TEST_F(ReplayJobTest, AJobStartedAgainResumesFromTheNewestReplayedVersionWhenAsked) {
  const std::string ckpt = root_ + "/l3-resume", plain = root_ + "/l3-plain";
  env_["RTFT_CKPT_KEEP_VERSIONS"] = "0";  // every version stays on disk
  env_["RTFT_PROTECT_REPLAY_EVERY"] = "4";
  const std::vector<std::string> l3 = {"--l3-every", "2", "--ckpt-dir", ckpt};
  std::vector<std::string> first_args = l3;
  first_args.insert(first_args.end(), {"--steps", "43"});
  Run first = Start("resume-1", 3, 1, "", 0, first_args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const StatusOr<uint64_t> latest = LatestVersion(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_EQ(*latest, 42u);
  env_["RTFT_PROTECT_RESUME_FROM"] = "replayed";
  Run again = Start("resume-2", 3, 1, "", 0, l3);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  ASSERT_EQ(again.digests.size(), 3u) << again.output;
  for (const auto& [rank, digest] : again.digests) EXPECT_EQ(digest, Reference(3)) << rank;
  ExpectEachRank(again, 3, kRestoredFromL3, "40");
  EXPECT_NE(again.output.find("L3: versions after step 40 withdrawn (42): RTFT_PROTECT_RESUME_FROM "
                              "resumes from version 40"),
            std::string::npos)
      << again.output;
  // Versions without a replay: refused, the newest named with its marks.
  env_.erase("RTFT_PROTECT_REPLAY_EVERY");
  env_.erase("RTFT_PROTECT_RESUME_FROM");
  Run unmarked =
      Start("plain-1", 3, 1, "", 0, {"--l3-every", "2", "--ckpt-dir", plain, "--steps", "11"});
  ASSERT_EQ(unmarked.exit_code, 0) << unmarked.output;
  for (const char* value : {"replayed", "bogus"}) {
    env_["RTFT_PROTECT_RESUME_FROM"] = value;
    Run refused =
        Start(std::string("plain-") + value, 3, 1, "", 0, {"--l3-every", "2", "--ckpt-dir", plain});
    EXPECT_NE(refused.exit_code, 0) << refused.output;
    EXPECT_TRUE(refused.digests.empty()) << refused.output;
    const std::string why =
        value == std::string("bogus")
            ? "RTFT_PROTECT_RESUME_FROM=bogus: latest, agreed or replayed"
            : "RTFT_PROTECT_RESUME_FROM=replayed: none of the 5 complete L3 version(s) in " +
                  plain +
                  " is marked replayed (its step checked by a replay); the newest, 10, has copies "
                  "agreed, not replayed";
    EXPECT_NE(refused.output.find(why), std::string::npos) << refused.output;
  }
  const StatusOr<uint64_t> left = LatestVersion(plain);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 10u) << "a refused start changes nothing";
  // Its versions' copies were compared and agreed (the cross-check is on by default): `agreed`
  // resumes from the newest, 10, and ends the same.
  env_["RTFT_PROTECT_RESUME_FROM"] = "agreed";
  Run agreed = Start("plain-agreed", 3, 1, "", 0, {"--l3-every", "2", "--ckpt-dir", plain});
  env_.erase("RTFT_PROTECT_RESUME_FROM");
  env_.erase("RTFT_CKPT_KEEP_VERSIONS");
  EXPECT_EQ(agreed.exit_code, 0) << agreed.output;
  ExpectEachRank(agreed, 3, kRestoredFromL3, "10");
  ASSERT_EQ(agreed.digests.size(), 3u) << agreed.output;
  for (const auto& [rank, digest] : agreed.digests) EXPECT_EQ(digest, Reference(3)) << rank;
}

// Without the replay the same flip reaches every rank through the reduction: the result differs
// (what the tests above guard against), and nothing notices.
TEST_F(ReplayJobTest, WithoutTheReplayTheFlipChangesTheResult) {
  const std::string& want = Reference(3);
  Run run = Start("flip-unseen", 3, 1, "1:train.grad_flip@30:flag", 0);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.digests.size(), 3u) << run.output;
  for (const auto& [rank, digest] : run.digests) EXPECT_NE(digest, want) << rank;
  EXPECT_EQ(run.output.find("silent data corruption"), std::string::npos) << run.output;
}

// The check for non-finite gradients (RTFT_PROTECT_CHECK_FINITE, no replay period): a NaN in
// rank 1's own gradients once (train.grad_nan) is seen before the reduction, the step is replayed
// and its second run is finite: the step goes on, nothing runs again.
TEST_F(ReplayJobTest, ANonFiniteGradientIsReplayedAndTheStepGoesOn) {
  env_["RTFT_PROTECT_CHECK_FINITE"] = "1";
  Run run = Start("nan-once", 3, 1, "1:train.grad_nan@30:flag", 0);
  env_.erase("RTFT_PROTECT_CHECK_FINITE");
  ExpectSameWithoutRecovery(run);
  EXPECT_NE(run.output.find("the gradients of data-parallel rank(s) 1 are not finite: the step is "
                            "replayed by a peer"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("the gradients of data-parallel rank(s) 1 are finite when computed "
                            "again: a transient fault, the step goes on"),
            std::string::npos)
      << run.output;
}

// A NaN at every step from the 30th on rank 1 (a faulty device): its replay is finite, its second
// run is not, its slot is retired and the spare takes its rank.
TEST_F(ReplayJobTest, ARankWhoseGradientsAreNeverFiniteIsReplacedByTheSpare) {
  env_["RTFT_PROTECT_CHECK_FINITE"] = "1";
  Run run = Start("nan-always", 3, 1, "1:train.grad_nan@30:flags", 0);
  env_.erase("RTFT_PROTECT_CHECK_FINITE");
  ExpectIdentical(run, 3, "a device whose gradients are never finite");
  EXPECT_NE(run.output.find("its second run disagrees too: its device is taken for faulty"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("device error, slot retired"), std::string::npos) << run.output;
}

// A NaN that every local compute makes, replays too (the model diverged): no device is blamed,
// and every rank ends its run before the step's update with the reason.
TEST_F(ReplayJobTest, GradientsThatTheirReplayMakesNonFiniteTooEndTheRun) {
  env_["RTFT_PROTECT_CHECK_FINITE"] = "1";
  Run run = Start("diverged", 3, 1,
                  "0:train.diverge@20:flags,1:train.diverge@20:flags,2:train.diverge@20:flags", 0);
  env_.erase("RTFT_PROTECT_CHECK_FINITE");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(run.digests.empty()) << run.output;
  EXPECT_NE(run.output.find("computed again they are not finite either: the model's own NaN"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("taken for faulty"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("slot retired"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace rtft::launch::test
