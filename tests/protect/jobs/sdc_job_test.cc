// Silent data corruption of resident state, end to end (docs/protect.md, "Silent data
// corruption"): `mpirun --enable-recovery dp-launch --spares 1 -- rtft-train` where one rank
// flips a bit of its copy of a replicated parameter between two steps (`train.flip`), or as a
// step's compute begins, after its snapshot (`train.stuck_flip`). The replicated tensors' cross-
// check finds the copy that differs from the others' at the next step's exchange; every rank
// goes back to the snapshot before, the last whose copies agreed, and runs on from there: each
// run ends with the digest of the run without the flip, bit for bit. Where some rank holds no
// older snapshot, the corrupt copy is fed from a peer's snapshot of the step. A rank that
// corrupts its state at every step is replaced by the spare; with two copies (no majority) both
// go back to the last step whose copies agreed.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "protect/jobs/train_job.h"

namespace rtft::launch::test {
namespace {

const std::vector<std::string> kTrain = {"--steps", "120", "--hidden",    "128",
                                         "--batch", "8",   "--log-every", "1000"};

class SdcJobTest : public TrainJobTest {
 protected:
  SdcJobTest() : TrainJobTest(kTrain, 1000) {}

  // `rtft-ckpt cat FILE params -n 0`: every value of a rank file's replicated parameters.
  static std::string Params(const std::string& file) {
    return Ckpt("cat '" + file + "' params -n 0");
  }
  // The rank files of every version under `ckpt`, by their path below it.
  static std::map<std::string, std::string> RankFiles(const std::string& ckpt) {
    std::map<std::string, std::string> files;
    std::error_code e;
    for (const auto& f : std::filesystem::recursive_directory_iterator(ckpt, e)) {
      const std::string name = f.path().filename().string();
      if (name.rfind("rank-", 0) == 0 && f.path().extension() == ".h5")
        files[std::filesystem::relative(f.path(), ckpt).string()] = f.path().string();
    }
    return files;
  }
};

TEST_F(SdcJobTest, AFlippedBitInAReplicatedCopyGoesBackToTheLastAgreedStep) {
  Run run = Start("flip-once", 3, 1, "1:train.flip@40:flag", 0);  // after step 39's update
  ExpectIdentical(run, 3, "one flipped bit");
  EXPECT_NE(run.output.find("silent data corruption: at step 40 the replicated tensors of "
                            "data-parallel rank(s) 1 differ from the other copies' (in 'params'); "
                            "back to step 39, the last whose copies agreed"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("slot 1 (rank 1): silent data corruption, recovered in place "
                            "(restart 1/"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("[train 1] recovered epoch=2 step=39 "), std::string::npos)
      << run.output;
  // Repaired in place: no slot lost, no spare taken.
  EXPECT_EQ(run.output.find("role=spare-activated"), std::string::npos) << run.output;
}

TEST_F(SdcJobTest, ARankThatKeepsCorruptingItsStateIsReplacedByTheSpare) {
  Run run = Start("flip-always", 3, 1, "1:train.flip@40:flags", 0);
  ExpectIdentical(run, 3, "a bit flipped at every step");
  EXPECT_NE(run.output.find("slot 1 (rank 1): silent data corruption, recovered in place "
                            "(restart 1/3)"),
            std::string::npos)
      << run.output;
  // The second corrupt copy retires the slot: a rank that disagrees twice goes to a spare.
  EXPECT_NE(run.output.find("slot 1 (rank 1): silent data corruption again (2 times), slot "
                            "retired; rank 1 -> spare slot 3"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("role=spare-activated rank=1"), std::string::npos) << run.output;
}

TEST_F(SdcJobTest, TwoCopiesThatDifferGoBackToTheLastAgreedStep) {
  Run run = Start("two-copies", 2, 1, "1:train.flip@40:flag", 0);
  ExpectIdentical(run, 2, "two copies differ");
  EXPECT_NE(run.output.find("2 copies differ with no majority (in 'params'); back to step 39, the "
                            "last whose copies agreed"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("role=spare-activated"), std::string::npos) << run.output;
}

// Two copies whose checksums differ are read again before anything is repaired: here rank 1's
// checksum of its step-30 copy is wrong, not the copy (`protect.checksum_flip`, a fault in the
// hash or its read). Read again, the tensors agree: nothing goes back, no recovery, and the run
// ends with the digest of the run without it. (TwoCopiesThatDiffer... above: read again, a real
// flip still differs, and both go back.)
TEST_F(SdcJobTest, TwoCopiesWhoseChecksumWasWrongAgreeWhenReadAgain) {
  Run run = Start("wrong-checksum", 2, 1, "1:protect.checksum_flip@30:flag", 0);
  const std::string& want = Reference(2);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.digests.size(), 2u) << run.output;
  for (const auto& [rank, digest] : run.digests) EXPECT_EQ(digest, want) << rank << run.output;
  EXPECT_EQ(run.recoveries, 0) << run.output;
  EXPECT_NE(run.output.find("checksums differ, and read again every tensor agrees on every rank: "
                            "a checksum was wrong"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("silent data corruption"), std::string::npos) << run.output;
}

// A flip between a step's snapshot and its compute, in a trainer whose update keeps it (DDP's,
// which updates its own full copy): step 40's compute reads rank 1's corrupt copy, so every
// rank's update of step 40 takes in its gradients, and the copies differ only from step 41's
// snapshot on. Every rank goes back to step 40's snapshot, the last whose copies agreed, and the
// run ends bitwise. (Feeding rank 1 step 41's snapshot from a peer, as the repair once did, kept
// the corrupt update: another digest.) Rank 1's compute waits until step 40's snapshot is copied
// (`protect.l1_copied` makes the file that `train.compute_start` waits for), so the snapshot
// never holds the flip.
TEST_F(SdcJobTest, AFlipThatAStepsComputeReadsGoesBackToThatStep) {
  const std::string copied = root_ + "/copied-40";
  const std::string faults = "1:protect.l1_copied@41:touch=" + copied +
                             ",1:train.compute_start@41:wait=" + copied +
                             ",1:train.stuck_flip@41:flag";
  Run run = Start("stuck-flip", 3, 1, faults, 0);
  ExpectIdentical(run, 3, "a bit flipped as step 40's compute began");
  EXPECT_NE(run.output.find("silent data corruption: at step 41 the replicated tensors of "
                            "data-parallel rank(s) 1 differ from the other copies' (in 'params'); "
                            "back to step 40, the last whose copies agreed"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("[train 1] recovered epoch=2 step=40 "), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("role=spare-activated"), std::string::npos) << run.output;
}

// Where some rank holds no older snapshot (`--protect-every 2`: every protected step is even,
// and L1 keeps one area per parity), the corrupt copy is fed from a peer's snapshot of the step
// that found it, which runs again: bitwise for a flip after the update (`train.flip`, after step
// 39's update; step 40's compute read the corrupt copy and runs again).
TEST_F(SdcJobTest, WithNoOlderSnapshotTheCorruptCopyIsFedFromAPeer) {
  Run run = Start("no-older", 3, 1, "1:train.flip@40:flag", 0, {"--protect-every", "2"});
  ExpectIdentical(run, 3, "one flipped bit, every second step protected");
  EXPECT_NE(run.output.find("the replicated tensors of data-parallel rank(s) 1 differ from the "
                            "other copies' (in 'params'); repaired from a peer, step 40 runs again "
                            "(no older snapshot on every rank"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("[train 1] recovered epoch=2 step=40 "), std::string::npos)
      << run.output;
}

// The wall time of the first note of `point` in a run's fault log (seconds; -1: none).
double NoteTime(const std::string& dir, const std::string& point) {
  std::ifstream in(dir + "/faults.log");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("fault " + point + " ", 0) != 0) continue;
    const size_t t = line.find(" t=");
    if (t != std::string::npos) return std::stod(line.substr(t + 3)) / 1e6;
  }
  return -1;
}

// The `t=` of the first line of the job's output that holds `what` (seconds; -1: none).
double LineTime(const std::string& output, const std::string& what) {
  const size_t at = output.find(what);
  if (at == std::string::npos) return -1;
  const std::string line = output.substr(at, output.find('\n', at) - at);
  const size_t t = line.rfind(" t=");
  return t == std::string::npos ? -1 : std::stod(line.substr(t + 3));
}

// RTFT_PROTECT_SDC_FENCE: the update waits for its step's cross-check, so no update ever runs on
// a corrupt copy. Rank 0 flips a bit of its copy (with three copies it is then the rank that
// asks for the repair), and its request is held (`protect.sdc_report`) until rank 0 updates or
// 2 s pass: without the fence its step-40 update would run meanwhile, in the epoch that found the
// corruption. With it, rank 0's 41st update (step 40's) comes only after its recovery.
TEST_F(SdcJobTest, WithTheFenceNoUpdateRunsOnACorruptCopy) {
  env_["RTFT_PROTECT_SDC_FENCE"] = "1";
  const std::string dir = root_ + "/fence", go = root_ + "/fence-go", noted = root_ + "/noted";
  std::ofstream(noted).put('\n');  // protect.update only notes its 41st reach: its file is there
  const std::string faults =
      "0:train.flip@40:flag,0:protect.sdc_report:wait=" + go + ",0:protect.update@41:wait=" + noted;
  Run run = Start("fence", 3, 1, faults, 0, {}, {}, nullptr, [&](Job& job) {
    EXPECT_TRUE(WaitFor([&] { return NoteTime(dir, "protect.sdc_report") > 0; }, seconds(60)))
        << job.Output();
    (void)WaitFor([&] { return NoteTime(dir, "protect.update") > 0; }, seconds(2));
    std::ofstream(go).put('\n');
  });
  env_.erase("RTFT_PROTECT_SDC_FENCE");
  ExpectIdentical(run, 3, "a flipped bit, the fence waiting for the check");
  EXPECT_NE(run.output.find("the replicated tensors of data-parallel rank(s) 0 differ"),
            std::string::npos)
      << run.output;
  const double recovered = LineTime(run.output, "[train 0] recovered epoch=2 ");
  const double updated = NoteTime(dir, "protect.update");
  ASSERT_GT(recovered, 0) << run.output;
  ASSERT_GT(updated, 0) << run.output;
  // The output's times have milliseconds.
  EXPECT_GE(updated, recovered - 0.001) << std::fixed << "rank 0 updated step 40 at " << updated
                                        << ", before its repair ended at " << recovered << "\n"
                                        << run.output;
}

// L3 takes only versions whose replicated copies agreed: the version of the corrupt step is not
// written from the corrupt snapshot, and every version on disk holds the parameters of the run
// without the flip (its rank files read back with rtft-ckpt, value by value).
TEST_F(SdcJobTest, L3WritesOnlyVersionsWhoseCopiesAgreed) {
  const std::string ref_ckpt = root_ + "/l3-ref-ckpt", flip_ckpt = root_ + "/l3-flip-ckpt";
  env_["RTFT_CKPT_KEEP_VERSIONS"] = "0";  // every version stays on disk, the corrupt step's too
  // The reference runs without the cross-check: the same values, its versions unmarked.
  env_["RTFT_PROTECT_SDC_CHECK"] = "0";
  Run ref = Start("l3-ref", 3, 1, "", 0, {"--l3-every", "10", "--ckpt-dir", ref_ckpt});
  env_.erase("RTFT_PROTECT_SDC_CHECK");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  Run run = Start("l3-flip", 3, 1, "1:train.flip@40:flag", 0,
                  {"--l3-every", "10", "--ckpt-dir", flip_ckpt});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The corrupt step's version was not written from its snapshot: either its write saw the
  // disagreement, or the repair's epoch aborted the step before its write.
  EXPECT_NE(run.output.find("silent data corruption: at step 40 "), std::string::npos)
      << run.output;
  EXPECT_TRUE(run.output.find("L3 version 40 not written: its replicated copies disagree") !=
                  std::string::npos ||
              run.output.find("] failure step=40 ") != std::string::npos)
      << run.output;
  const auto want = RankFiles(ref_ckpt), got = RankFiles(flip_ckpt);
  ASSERT_FALSE(got.empty()) << flip_ckpt;
  env_.erase("RTFT_CKPT_KEEP_VERSIONS");
  // Versions 10, 20, ..., 110, each with a file per rank, in both runs.
  EXPECT_EQ(got.size(), want.size());
  size_t compared = 0;
  bool corrupt_step = false;
  for (const auto& [name, path] : got) {
    auto it = want.find(name);
    ASSERT_NE(it, want.end()) << name << " is not in the run without the flip";
    const std::string values = Params(path);
    ASSERT_NE(values.find_first_of("0123456789"), std::string::npos) << values;
    EXPECT_EQ(values, Params(it->second)) << name;
    corrupt_step = corrupt_step || name.find("000000040") != std::string::npos;
    ++compared;
  }
  EXPECT_GE(compared, 30u) << "versions 10 to 110 of 3 ranks";
  EXPECT_TRUE(corrupt_step) << "version 40, the corrupt step's, was compared";
  // Their manifests say whether the copies were compared (docs/format.md, "Certification"):
  // every version of the checked run agreed, none of the reference's was compared.
  for (const auto& [dir, mark] : {std::pair(flip_ckpt, "agreed"), std::pair(ref_ckpt, "-")}) {
    const std::string ls = Ckpt("ls '" + dir + "'");
    size_t versions = 0;
    for (size_t at = ls.find(" complete "); at != std::string::npos;
         at = ls.find(" complete ", at + 1)) {
      const std::string line = ls.substr(at, ls.find('\n', at) - at);
      EXPECT_NE(line.find(std::string(" ") + mark + " "), std::string::npos) << line << "\n" << ls;
      ++versions;
    }
    EXPECT_GE(versions, 10u) << ls;
  }
  EXPECT_NE(Ckpt("verify '" + flip_ckpt + "'").find("replicated copies agreed when written"),
            std::string::npos);
}

}  // namespace
}  // namespace rtft::launch::test
