// The inputs of `rtft-bench goodput`: the documented defaults give Llama 3's failure rate and a
// valid simulation at 1K-16K GPUs; the measured figures are read from the JSON lines of
// rtft-bench protect, recovery and ckpt with their file and line as the source; anything else
// in those files or on the command line (wrong type, out of range, NaN, not a regular file, too
// large, lines that are not JSON objects) is refused with InvalidArgument naming the file.
#include "bench/goodput/goodput_inputs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "test_util.h"

namespace rtft::bench::goodput {
namespace {

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

void ExpectRefused(const Status& s, const std::string& mentions) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s;
}

TEST(GoodputInputs, DefaultsGiveLlama3AndAValidSimulation) {
  const GoodputInputs in = GoodputInputs::Defaults();
  nlohmann::json derived;
  StatusOr<SimParams> p = ToSimParams(in, 16384, 8, &derived);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->nodes, 2048);
  EXPECT_NEAR(JobMtbfSeconds(*p) / 3600, 54.0 * 24 / 419, 1e-9);  // one failure in 3.09 h
  EXPECT_NEAR(p->protect_overhead, 0.025, 1e-12);
  // A GPU's share of 2 TB/s caps the measured local-disk bandwidth at 16K GPUs.
  EXPECT_NEAR(derived["l3_write_gbps_per_gpu"].get<double>(), 2000.0 / 16384, 1e-12);
  EXPECT_NEAR(p->ckpt_write_s, 4 / (2000.0 / 16384), 1e-9);
  EXPECT_EQ(p->spares, 22);
  for (int gpus : {1024, 4096}) EXPECT_TRUE(ToSimParams(in, gpus, 8, &derived).ok());
  for (const Input& i : in.all()) {
    EXPECT_FALSE(i.source.empty()) << i.name;
    EXPECT_TRUE(in.ToJson()[i.name].contains("source")) << i.name;
  }
  ExpectRefused(ToSimParams(in, 1001, 8, &derived).status(), "multiple");
  ExpectRefused(ToSimParams(in, 8, 8, &derived).status(), "two nodes");
}

TEST(GoodputInputs, SetChecksRangeTypeAndName) {
  GoodputInputs in = GoodputInputs::Defaults();
  EXPECT_TRUE(in.Set("step_s", 3, "test").ok());
  EXPECT_EQ(in.Get("step_s"), 3);
  ExpectRefused(in.Set("step_s", std::numeric_limits<double>::quiet_NaN(), "flag"), "step_s");
  ExpectRefused(in.Set("step_s", std::numeric_limits<double>::infinity(), "flag"), "step_s");
  ExpectRefused(in.Set("step_s", -1, "flag"), "must be in");
  ExpectRefused(in.Set("transient_fraction", 1.5, "flag"), "transient_fraction");
  ExpectRefused(in.Set("spares", 2.5, "flag"), "integer");
  ExpectRefused(in.Set("no_such_input", 1, "flag"), "unknown");
  EXPECT_EQ(in.Get("step_s"), 3);  // a refused value changes nothing
}

TEST(GoodputInputs, AutoSparesCoverTheNodesInRepair) {
  EXPECT_EQ(AutoSpares(2048, 419.0 / (2048 * 54 * 24) * 0.78, 48, 0.01), 22);  // Poisson(12.1)
  EXPECT_EQ(AutoSpares(100, 0, 48, 0.01), 1);
  EXPECT_EQ(AutoSpares(1, 3, 1, 0.01), 9);       // Poisson(3): P(N >= 9) = 0.0038
  const int big = AutoSpares(1000, 1, 1, 0.01);  // normal approximation: 1000 + 2.33 x 31.6
  EXPECT_GE(big, 1070);
  EXPECT_LE(big, 1076);
}

TEST(GoodputInputs, ReadsMeasuredFiguresWithTheirSource) {
  TempDir dir;
  GoodputInputs in = GoodputInputs::Defaults();
  const std::string protect = Write(dir, "protect.jsonl",
                                    "{\"name\":\"protect\",\"overhead_pct\":4.0}\n\n"
                                    "{\"name\":\"protect\",\"overhead_pct\":1.5}\n");
  ASSERT_TRUE(in.ReadProtectJson(protect).ok());
  EXPECT_EQ(in.Get("protect_overhead_pct"), 1.5);  // the last line counts
  EXPECT_NE(
      in.ToJson()["protect_overhead_pct"]["source"].get<std::string>().find(protect + " line 3"),
      std::string::npos);
  const std::string recovery =
      Write(dir, "recovery.jsonl",
            "{\"name\":\"recovery\",\"failure\":\"process\",\"detect_s\":0.01,\"resumed_s\":0.5,"
            "\"step_s\":0.3}\n"
            "{\"name\":\"recovery\",\"failure\":\"slot\",\"detect_s\":0.9,\"resumed_s\":1.5,"
            "\"step_s\":0.25}\n");
  ASSERT_TRUE(in.ReadRecoveryJson(recovery).ok());
  EXPECT_EQ(in.Get("rtft_detect_node_s"), 0.9);
  EXPECT_NEAR(in.Get("rtft_recover_crash_s"), 0.5 - 0.01 - 0.3, 1e-12);
  EXPECT_NEAR(in.Get("rtft_recover_node_s"), 1.5 - 0.9 - 0.25, 1e-12);
  // The recovery simulation: the one-failure case at the largest agent count, whatever the
  // order of the lines; the other cases are not the protocol of a single failure.
  const std::string sim =
      Write(dir, "sim.jsonl",
            "{\"name\":\"recovery_sim\",\"agents\":4096,\"second_failure\":\"none\","
            "\"protocol_s\":0.8}\n"
            "{\"name\":\"recovery_sim\",\"agents\":4096,\"second_failure\":\"during_gather\","
            "\"protocol_s\":3}\n"
            "{\"name\":\"recovery_sim\",\"agents\":256,\"second_failure\":\"none\","
            "\"protocol_s\":0.1}\n");
  ASSERT_TRUE(in.ReadRecoverySimJson(sim).ok());
  EXPECT_EQ(in.Get("rtft_protocol_s"), 0.8);
  EXPECT_NE(in.ToJson()["rtft_protocol_s"]["source"].get<std::string>().find(sim + " line 1"),
            std::string::npos);
  const std::string ckpt = Write(dir, "ckpt.jsonl",
                                 "{\"name\":\"ckpt\",\"variant\":\"raw\",\"persist_gbps\":9}\n"
                                 "{\"name\":\"ckpt\",\"variant\":\"rtft\",\"bytes\":2000000000,"
                                 "\"persist_gbps\":1.5,\"restore_device_gbps\":null,"
                                 "\"restore_gbps\":1.2,\"blocking_s\":0.1}\n");
  ASSERT_TRUE(in.ReadCkptJson(ckpt).ok());
  EXPECT_EQ(in.Get("l3_write_gbps_per_gpu"), 1.5);
  EXPECT_EQ(in.Get("l3_load_gbps_per_gpu"), 1.2);  // no GPU restore: the host one
  EXPECT_NEAR(in.Get("ckpt_blocking_s_per_gb"), 0.05, 1e-12);
  // A negative median overhead is noise: taken as 0, and said so.
  ASSERT_TRUE(
      in.ReadProtectJson(Write(dir, "neg.jsonl", "{\"name\":\"protect\",\"overhead_pct\":-0.4}"))
          .ok());
  EXPECT_EQ(in.Get("protect_overhead_pct"), 0);
  EXPECT_NE(in.ToJson()["protect_overhead_pct"]["source"].get<std::string>().find("taken as 0"),
            std::string::npos);
}

TEST(GoodputInputs, HostileFilesRefused) {
  TempDir dir;
  GoodputInputs in = GoodputInputs::Defaults();
  const double before = in.Get("protect_overhead_pct");
  auto protect = [&](const std::string& name, const std::string& text) {
    return in.ReadProtectJson(Write(dir, name, text));
  };
  ExpectRefused(protect("text.jsonl", "overhead 2.5 %\n"), "line 1: not a JSON object");
  ExpectRefused(protect("array.jsonl", "[1, 2]\n"), "not a JSON object");
  ExpectRefused(protect("other.jsonl", "{\"name\":\"ckpt\"}\n"), "no line");
  ExpectRefused(protect("string.jsonl", "{\"name\":\"protect\",\"overhead_pct\":\"2.5\"}"),
                "must be a number");
  ExpectRefused(protect("bool.jsonl", "{\"name\":\"protect\",\"overhead_pct\":true}"),
                "must be a number");
  ExpectRefused(protect("huge.jsonl", "{\"name\":\"protect\",\"overhead_pct\":1e999}"),
                "not a JSON object");
  ExpectRefused(protect("range.jsonl", "{\"name\":\"protect\",\"overhead_pct\":400}"),
                "must be in");
  ExpectRefused(protect("big.jsonl", std::string(2 << 20, ' ')), "larger than 1048576 bytes");
  ExpectRefused(in.ReadProtectJson(dir.path() + "/missing.jsonl"), "missing.jsonl");
  ExpectRefused(in.ReadProtectJson(dir.path()), "not a regular file");
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectRefused(in.ReadProtectJson(fifo), "not a regular file");  // refused, never waited on
  EXPECT_EQ(in.Get("protect_overhead_pct"), before);
  // Recovery: both failures needed, resumed after detected.
  ExpectRefused(in.ReadRecoveryJson(Write(dir, "r1.jsonl",
                                          "{\"name\":\"recovery\",\"failure\":\"process\","
                                          "\"detect_s\":0.01,\"resumed_s\":0.5,\"step_s\":0.3}")),
                "\"slot\"");
  ExpectRefused(in.ReadRecoveryJson(Write(dir, "r2.jsonl",
                                          "{\"name\":\"recovery\",\"failure\":\"process\","
                                          "\"detect_s\":2,\"resumed_s\":0.5,\"step_s\":0.3}")),
                "resumed_s");
  // Recovery --sim: no one-failure line, agents not a number, a negative protocol_s.
  const double protocol = in.Get("rtft_protocol_s");
  ExpectRefused(
      in.ReadRecoverySimJson(Write(dir, "s1.jsonl",
                                   "{\"name\":\"recovery_sim\",\"agents\":64,"
                                   "\"second_failure\":\"100ms_after\",\"protocol_s\":1}")),
      "\"none\"");
  ExpectRefused(in.ReadRecoverySimJson(Write(dir, "s2.jsonl",
                                             "{\"name\":\"recovery_sim\",\"agents\":\"many\","
                                             "\"second_failure\":\"none\",\"protocol_s\":1}")),
                "'agents' must be a number");
  ExpectRefused(in.ReadRecoverySimJson(Write(dir, "s3.jsonl",
                                             "{\"name\":\"recovery_sim\",\"agents\":64,"
                                             "\"second_failure\":\"none\",\"protocol_s\":-1}")),
                "'protocol_s' must be in");
  EXPECT_EQ(in.Get("rtft_protocol_s"), protocol);
  // Ckpt: a zero bandwidth, no restore figure at all.
  ExpectRefused(in.ReadCkptJson(Write(dir, "c1.jsonl",
                                      "{\"name\":\"ckpt\",\"variant\":\"rtft\",\"bytes\":1e9,"
                                      "\"persist_gbps\":0,\"restore_gbps\":1,\"blocking_s\":0}")),
                "persist_gbps");
  ExpectRefused(in.ReadCkptJson(Write(dir, "c2.jsonl",
                                      "{\"name\":\"ckpt\",\"variant\":\"rtft\",\"bytes\":1e9,"
                                      "\"persist_gbps\":1,\"blocking_s\":0}")),
                "restore_gbps");
}

}  // namespace
}  // namespace rtft::bench::goodput
