// The numbered examples as a user runs them (examples/README.md): 01_checkpoint alone; the others
// under `mpirun --enable-recovery dp-launch --spares 1`, with the process of slot 1 made to fail
// at a named phase through the job's RTFT_FAULT ("1/point@n:action": slot 1's first process only)
// and, for a lost slot, its dp-launch SIGKILLed while that process stands at the point. Each run
// must end as a run without the failure: every rank's digest equal to the reference's.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "launcher/launch_job.h"
#include "launcher/slot_loss_run.h"
#include "test_util.h"

namespace rtft::launch::test {
namespace {

using std::chrono::seconds;

#if defined(RTFT_PYTHON_EXECUTABLE)
// The build's interpreter, module and sources, or the environment's (RTFT_TEST_PYTHON,
// RTFT_TEST_PYTHON_DIR, RTFT_TEST_SOURCE_DIR: a bundle run on another machine, docs/testing.md).
std::string Configured(const char* variable, const char* built) {
  const char* v = std::getenv(variable);
  return v && *v ? v : built;
}
std::string Python() { return Configured("RTFT_TEST_PYTHON", RTFT_PYTHON_EXECUTABLE); }
#endif

class ExamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rtft-examples-XXXXXX";
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
    int exit_code = -1;
    std::string output;
    std::map<int, std::string> digests;  // rank -> digest
  };

  // `program` on 3 active slots and a spare; with `fault`, slot 1's process fails there, and
  // `lose` SIGKILLs slot 1's dp-launch once it stands at the point.
  Run Start(const std::string& name, const std::string& program, std::vector<std::string> args,
            const std::string& fault = "", bool lose = false) {
    std::vector<std::string> app = {std::string(RTFT_EXAMPLES_DIR) + "/" + program};
    app.insert(app.end(), args.begin(), args.end());
    return StartApp(name, app, {}, fault, lose);
  }
  // The same with a command line of its own (an interpreter and its script) and more variables,
  // on `slots` slots of which `spares` are spares, with more dp-launch options.
  Run StartApp(const std::string& name, const std::vector<std::string>& app,
               const std::map<std::string, std::string>& env, const std::string& fault = "",
               bool lose = false, int slots = 4, int spares = 1,
               const std::vector<std::string>& dp_extra = {}) {
    const std::string dir = root_ + "/" + name;
    std::filesystem::create_directories(dir);
    JobSpec spec;
    spec.slots = slots;
    // 1 s: a Python rank's start (torch's import, the spare's activation) beside other tests on
    // CI's two cores once starved a dp-launch past 500 ms, and the run without a failure lost a
    // slot it had not lost.
    spec.dp_args = {"--spares", std::to_string(spares),   "--heartbeat-ms",
                    "50",       "--heartbeat-timeout-ms", "1000"};
    spec.dp_args.insert(spec.dp_args.end(), dp_extra.begin(), dp_extra.end());
    spec.app = app;
    spec.env = env;
    const SlotLossRun job = RunLosingSlotOne(dir, spec, fault, lose);
    Run run;
    run.exit_code = job.exit_code;
    run.output = job.output;
    // Not greedy: the launcher may forward two ranks' lines without a line break between them.
    static const std::regex done(R"(\[\w+ (\d+)\] done [^\[]*?digest=([0-9a-f]{16}))");
    for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), done);
         it != std::sregex_iterator(); ++it)
      run.digests[std::stoi((*it)[1])] = (*it)[2];
    return run;
  }

  void ExpectLikeTheReference(const Run& run, const Run& ref) {
    EXPECT_EQ(ref.exit_code, 0) << ref.output;
    ASSERT_EQ(ref.digests.size(), 3u) << ref.output;
    EXPECT_EQ(run.exit_code, 0) << run.output;
    ASSERT_EQ(run.digests.size(), 3u) << run.output;
    for (const auto& [rank, digest] : run.digests)
      EXPECT_EQ(digest, ref.digests.begin()->second) << "rank " << rank << "\n" << run.output;
  }

  // Sharded state (FSDP2): each rank ends with the digest of its own shards in the reference.
  void ExpectShardsLikeTheReference(const Run& run, const Run& ref, size_t ranks) {
    EXPECT_EQ(ref.exit_code, 0) << ref.output;
    ASSERT_EQ(ref.digests.size(), ranks) << ref.output;
    EXPECT_EQ(run.exit_code, 0) << run.output;
    ASSERT_EQ(run.digests.size(), ranks) << run.output;
    EXPECT_EQ(run.digests, ref.digests) << run.output;
  }

  std::string root_;
};

TEST_F(ExamplesTest, Checkpoint) {
  const std::string out = root_ + "/01.out";
  const std::string cmd = std::string(RTFT_EXAMPLES_DIR) + "/example-01-checkpoint --dir " + root_ +
                          "/ckpt --layers 2 --params-per-layer 65536 --steps 8 --every 2 > " + out +
                          " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("IDENTICAL to the uninterrupted run"), std::string::npos) << text;
}

TEST_F(ExamplesTest, CommunicatorAbortedByADeadPeerGoesOnInTheNextEpoch) {
  // Slot 1's process dies in the middle of an all-reduce; the survivors' calls return kAborted,
  // and the next epoch (with the process restarted on slot 1) finishes every iteration.
  Run run = Start("02", "example-02-communicator", {"--iterations", "30"},
                  "1/comm.gloo.ring_segment@12:kill");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("aborted at iteration"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[comm 0] iteration 29 sum"), std::string::npos) << run.output;
  std::set<std::string> done;
  for (size_t at = run.output.find("] done iterations=30"); at != std::string::npos;
       at = run.output.find("] done iterations=30", at + 1))
    done.insert(run.output.substr(at - 1, 1));
  EXPECT_EQ(done.size(), 3u) << run.output;
}

TEST_F(ExamplesTest, HotSwapEndsLikeARunWithoutTheLostSlot) {
  const Run ref = Start("03-ref", "example-03-hot-swap", {"--steps", "30"});
  const Run run = Start("03-lost", "example-03-hot-swap", {"--steps", "30"},
                        "1/protect.update@12:hang", /*lose=*/true);
  ExpectLikeTheReference(run, ref);
}

TEST_F(ExamplesTest, OffloadEndsLikeARunWithoutTheLostSlot) {
  const Run ref = Start("04-ref", "example-04-offload", {"--steps", "24"});
  const Run run = Start("04-lost", "example-04-offload", {"--steps", "24"},
                        "1/protect.update@9:hang", /*lose=*/true);
  ExpectLikeTheReference(run, ref);
  // Every rank's optimizer took every step once: the spare's step count came with its state.
  for (const char* line : {"[offload 0] done steps=24 optimizer_steps=24",
                           "[offload 1] done steps=24 optimizer_steps=24",
                           "[offload 2] done steps=24 optimizer_steps=24"})
    EXPECT_NE(run.output.find(line), std::string::npos) << line << "\n" << run.output;
}

TEST_F(ExamplesTest, OffloadEndsLikeARunWithoutTheCrash) {
  const Run ref = Start("04-ref", "example-04-offload", {"--steps", "24"});
  const Run run =
      Start("04-crash", "example-04-offload", {"--steps", "24"}, "1/protect.capture@9:kill");
  ExpectLikeTheReference(run, ref);
}

// examples/python/train.py (a PyTorch loop) under the interpreter the module rtft was built for.
class PythonExampleTest : public ExamplesTest {
 protected:
  void SetUp() override {
#if !defined(RTFT_PYTHON_EXECUTABLE)
    GTEST_SKIP() << "the Python module rtft is not built";
#endif
    ExamplesTest::SetUp();
  }
  Run StartTrain(const std::string& name, const std::string& fault = "", bool lose = false,
                 const std::string& device = "cpu") {
    return StartScript(name, {"train.py", "--steps", "30", "--device", device}, fault, lose);
  }
  // examples/python/<args[0]> with the rest of `args`.
  Run StartScript(const std::string& name, std::vector<std::string> args,
                  const std::string& fault = "", bool lose = false, int slots = 4, int spares = 1,
                  const std::vector<std::string>& dp_extra = {}) {
#if defined(RTFT_PYTHON_EXECUTABLE)
    args[0] = Configured("RTFT_TEST_SOURCE_DIR", RTFT_SOURCE_DIR) + "/examples/python/" + args[0];
    args.insert(args.begin(), Python());
    return StartApp(name, args,
                    {{"PYTHONPATH", Configured("RTFT_TEST_PYTHON_DIR", RTFT_PYTHON_DIR)},
                     { "PYTHONDONTWRITEBYTECODE",
                       "1" }},
                    fault, lose, slots, spares, dp_extra);
#else
    return {};
#endif
  }
  // examples/python/<args[0]>: slot 1 lost at the update of step `lost_at`, and slot 1's process
  // killed at the capture of step `crash_at`, each ending like a run without the failure.
  void ExpectLostAndCrashLikeTheReference(const std::string& name,
                                          const std::vector<std::string>& args, int lost_at,
                                          int crash_at) {
    const Run ref = StartScript(name + "-ref", args);
    const Run lost = StartScript(name + "-lost", args,
                                 "1/protect.update@" + std::to_string(lost_at) + ":hang", true);
    ExpectLikeTheReference(lost, ref);
    const Run crash = StartScript(name + "-crash", args,
                                  "1/protect.capture@" + std::to_string(crash_at) + ":kill");
    ExpectLikeTheReference(crash, ref);
  }
  // Skips unless the interpreter's torch has what `probe` (a Python expression) needs.
  void SkipUnless(const std::string& probe, const std::string& why) {
#if defined(RTFT_PYTHON_EXECUTABLE)
    int rc = -1;
    RunCommand(Python() + " -c 'import sys, torch\ntry:\n    sys.exit(0 if (" + probe +
                   ") else 1)\nexcept Exception:\n    sys.exit(1)'",
               &rc);
    if (rc != 0) GTEST_SKIP() << why;
#endif
  }
};

TEST_F(PythonExampleTest, PythonTrainEndsLikeARunWithoutTheLostSlot) {
  const Run ref = StartTrain("py-ref");
  const Run run = StartTrain("py-lost", "1/protect.update@12:hang", /*lose=*/true);
  ExpectLikeTheReference(run, ref);
}

TEST_F(PythonExampleTest, PythonTrainEndsLikeARunWithoutTheCrash) {
  const Run ref = StartTrain("py-ref");
  const Run run = StartTrain("py-crash", "1/protect.capture@9:kill");
  ExpectLikeTheReference(run, ref);
}

// examples/python/train_zero.py: ZeRO-1 (each rank's rows of AdamW's moments, rtft.Shard) on 3
// ranks and no spare, slot 1 lost at the update of step 12 with
// `--on-spares-exhausted shrink`: rt-ft asks the script's `resize` for the state over 2 ranks
// and moves the moments' rows to their new owners. The script's arithmetic does not depend on the
// number of ranks, so both ranks left end with the digest of the 3-rank run without a failure.
TEST_F(PythonExampleTest, ZeroShrinksToTheRanksLeftAndEndsLikeARunWithoutTheLoss) {
  const std::vector<std::string> args = {"train_zero.py", "--steps", "24"};
  const Run ref = StartScript("zero-ref", args, "", false, 3, 0);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_EQ(ref.digests.size(), 3u) << ref.output;
  const Run run = StartScript("zero-shrink", args, "1/protect.update@12:hang", /*lose=*/true, 3, 0,
                              {"--on-spares-exhausted", "shrink"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.digests.size(), 2u) << run.output;
  for (const auto& [rank, digest] : run.digests)
    EXPECT_EQ(digest, ref.digests.begin()->second) << "rank " << rank << "\n" << run.output;
  EXPECT_NE(run.output.find("done steps=24 world=2 "), std::string::npos) << run.output;
}

// A resize that puts a shard at other rows than rt-ft's (tests/python/jobs/bad_resize_job.py, 3
// ranks, no spare, slot 1 lost): refused by name on the ranks left, the shard's place and the
// one wanted both given, and the job ends with an error instead of filling the wrong rows.
TEST_F(PythonExampleTest, AResizeThatMisplacesAShardIsRefusedByName) {
#if defined(RTFT_PYTHON_EXECUTABLE)
  const std::string job =
      Configured("RTFT_TEST_SOURCE_DIR", RTFT_SOURCE_DIR) + "/tests/python/jobs/bad_resize_job.py";
  const Run run =
      StartApp("bad-resize", {Python(), job},
               {{"PYTHONPATH", Configured("RTFT_TEST_PYTHON_DIR", RTFT_PYTHON_DIR)},
                {"PYTHONDONTWRITEBYTECODE", "1"}},
               "1/protect.update@5:hang", /*lose=*/true, 3, 0, {"--on-spares-exhausted", "shrink"});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(run.digests.empty()) << run.output;
  EXPECT_NE(run.output.find("the job shrank from 3 to 2 ranks: ResizeState described shard "
                            "'moment' (float32 [6, 4] at [1, 0] of [12, 4]) where 'moment' "
                            "(float32 [6, 4] at [0, 0] of [12, 4]) was"),
            std::string::npos)
      << run.output;
#endif
}

// examples/python/train_ddp.py: DDP (dropout, LayerNorm, a DataLoader) over
// rtft.torch.ProcessGroup; the spare builds its DDP while the others train.
TEST_F(PythonExampleTest, DdpEndsLikeARunWithoutTheFailures) {
  const std::vector<std::string> args = {"train_ddp.py", "--steps", "24"};
  const Run ref = StartScript("ddp-ref", args);
  const Run lost = StartScript("ddp-lost", args, "1/protect.update@12:hang", /*lose=*/true);
  ExpectLikeTheReference(lost, ref);
  const Run crash = StartScript("ddp-crash", args, "1/protect.capture@9:kill");
  ExpectLikeTheReference(crash, ref);
  // Killed inside one of DDP's all-reduces: the others' Work completes aborted, their step
  // raises AbortedError when compute returns, and every rank runs it again.
  const Run in_collective =
      StartScript("ddp-collective", args, "1/comm.gloo.watched_segment@40:kill");
  ExpectLikeTheReference(in_collective, ref);
}

// examples/python/train_fsdp2.py: FSDP2 over rt-ft's c10d backend (torch 2.4 or later: torch
// 1.13 has no fully_shard, and its init_process_group ends in a barrier a spare cannot pass).
class PythonFsdp2ExampleTest : public PythonExampleTest {
 protected:
  void SetUp() override {
    PythonExampleTest::SetUp();
    if (IsSkipped()) return;
    SkipUnless("__import__(\"torch.distributed.fsdp\", fromlist=[\"fully_shard\"]).fully_shard",
               "the interpreter's torch has no FSDP2 (fully_shard)");
  }
  // `hsdp`: every rank's DTensor shards are replicated in its data-parallel group (the grid's
  // replicas, fed from a live one and out of L2's ring); else none is.
  void ExpectEveryFailure(const std::vector<std::string>& args, int slots, bool hsdp = false) {
    const size_t ranks = static_cast<size_t>(slots - 1);
    const Run ref = StartScript("fsdp-ref", args, "", false, slots);
    const std::regex shared(R"(\] done steps=\d+ digest=\w+ replicated_shards=(\d+) )");
    size_t lines = 0;
    for (std::sregex_iterator it(ref.output.begin(), ref.output.end(), shared), end; it != end;
         ++it, ++lines)
      EXPECT_EQ(std::stoi((*it)[1]) > 0, hsdp) << ref.output;
    EXPECT_EQ(lines, ranks) << ref.output;
    const Run lost = StartScript("fsdp-lost", args, "1/protect.update@8:hang", true, slots);
    ExpectShardsLikeTheReference(lost, ref, ranks);
    const Run crash = StartScript("fsdp-crash", args, "1/protect.capture@6:kill", false, slots);
    ExpectShardsLikeTheReference(crash, ref, ranks);
    // Killed inside one of FSDP2's all-gathers or reduce-scatters.
    const Run in_collective =
        StartScript("fsdp-collective", args, "1/comm.gloo.watched_segment@40:kill", false, slots);
    ExpectShardsLikeTheReference(in_collective, ref, ranks);
  }
};

TEST_F(PythonFsdp2ExampleTest, Fsdp2EndsLikeARunWithoutTheFailures) {
  ExpectEveryFailure({"train_fsdp2.py", "--steps", "16"}, 4);
}

TEST_F(PythonFsdp2ExampleTest, HsdpEndsLikeARunWithoutTheFailures) {
  ExpectEveryFailure({"train_fsdp2.py", "--steps", "16", "--replicate", "2"}, 5, true);
}

TEST_F(PythonFsdp2ExampleTest, Fsdp2OnTheGpuEndsLikeARunWithoutTheFailures) {
  SkipUnless("torch.cuda.is_available()", "the interpreter's torch sees no CUDA device");
  ExpectEveryFailure({"train_fsdp2.py", "--steps", "16", "--device", "cuda"}, 4);
}

TEST_F(PythonFsdp2ExampleTest, HsdpOnTheGpuEndsLikeARunWithoutTheFailures) {
  SkipUnless("torch.cuda.is_available()", "the interpreter's torch sees no CUDA device");
  ExpectEveryFailure({"train_fsdp2.py", "--steps", "16", "--replicate", "2", "--device", "cuda"}, 5,
                     true);
}

// The same loop with CUDA tensors, the three ranks and the spare sharing one GPU over the
// host-staged Gloo communicator (label gpu: skipped where the interpreter's torch sees no GPU).
class PythonGpuExampleTest : public PythonExampleTest {
 protected:
  void SetUp() override {
    PythonExampleTest::SetUp();
    if (IsSkipped()) return;
#if defined(RTFT_PYTHON_EXECUTABLE)
    int rc = -1;
    RunCommand(
        Python() + " -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'", &rc);
    if (rc != 0) GTEST_SKIP() << "the interpreter's torch sees no CUDA device";
#endif
  }
};

TEST_F(PythonGpuExampleTest, PythonTrainOnTheGpuEndsLikeARunWithoutTheFailures) {
  const Run ref = StartTrain("py-gpu-ref", "", false, "cuda");
  const Run crash = StartTrain("py-gpu-crash", "1/protect.capture@9:kill", false, "cuda");
  ExpectLikeTheReference(crash, ref);
  const Run lost = StartTrain("py-gpu-lost", "1/protect.update@12:hang", /*lose=*/true, "cuda");
  ExpectLikeTheReference(lost, ref);
}

// train_ddp.py with the model on the GPU: DDP's buckets staged through host buffers.
TEST_F(PythonGpuExampleTest, DdpOnTheGpuEndsLikeARunWithoutTheFailures) {
  ExpectLostAndCrashLikeTheReference("ddp-gpu",
                                     {"train_ddp.py", "--steps", "24", "--device", "cuda"}, 12, 9);
}

// train_gpt2.py: a transformers GPT-2 with its default dropout under DDP on the GPU; the State
// holds the random generators by default, so the steps run again draw the same masks.
TEST_F(PythonGpuExampleTest, Gpt2WithDropoutEndsLikeARunWithoutTheFailures) {
  SkipUnless("__import__(\"transformers\").GPT2LMHeadModel", "the interpreter has no transformers");
  ExpectLostAndCrashLikeTheReference("gpt2", {"train_gpt2.py", "--steps", "16", "--device", "cuda"},
                                     9, 6);
}

}  // namespace
}  // namespace rtft::launch::test
