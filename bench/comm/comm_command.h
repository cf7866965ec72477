// The command class of `rtft-bench comm` (comm_bench.h says what it measures), shared by its two
// files: comm_bench.cc (the options, the simulation and the report) and comm_jobs.cc (the
// jobs under mpirun + dp-launch it times).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/comm/comm_worker.h"
#include "bench/common/bench_command.h"
#include "bench/common/bench_util.h"

namespace rtft::bench {

class CommCommand final : public BenchCommand {
 public:
  const char* name() const override { return "comm"; }
  const char* help() const override {
    return "communicators: rt-ft's all-reduce against Gloo's own / NCCL directly, abort and "
           "rebuild after a SIGKILLed rank (real processes under mpirun + dp-launch)";
  }
  void AddFlags(CLI::App* cmd) override {
    cmd->add_option("--backend", backend_, "gloo or nccl")->capture_default_str();
    cmd->add_option("--ranks", ranks_, "ranks (active slots; the failure jobs add a spare)")
        ->capture_default_str();
    cmd->add_option("--bytes", bytes_text_, "all-reduce sizes, comma list (K/M/G)")
        ->capture_default_str();
    cmd->add_option("--rounds", rounds_, "timed rounds per size and path (median)")
        ->capture_default_str();
    cmd->add_option("--gpus", gpus_, "NCCL: GPUs on this machine (rank r uses GPU r % gpus)")
        ->capture_default_str();
    cmd->add_option("--heartbeat-timeout-ms", heartbeat_timeout_ms_,
                    "dp-launch heartbeat timeout of the failure jobs")
        ->capture_default_str();
    cmd->add_flag("--no-failure", no_failure_, "skip the abort/rebuild jobs");
    cmd->add_flag("--shrink", shrink_,
                  "NCCL, 2 ranks or more: also time ncclCommRevoke + ncclCommShrink after a lost "
                  "slot (the shrink policy's path without a new unique id)");
    cmd->add_option("--dp-launch", dp_launch_, "dp-launch binary (default: next to rtft-bench)");
    cmd->add_flag("--sim", sim_,
                  "Gloo's rendezvous instead: --sim-ranks ranks as threads of this process, "
                  "through an in-process store that counts its traffic");
    cmd->add_option("--sim-ranks", sim_ranks_, "--sim: rank counts, comma-separated (2 to 4096)")
        ->capture_default_str();
    cmd->add_option("--sim-pairs", sim_pairs_,
                    "--sim: RTFT_COMM_GLOO_PAIRS settings, comma-separated (all, ring)")
        ->capture_default_str();
    // Internal: how the bench runs itself as a rank of its jobs.
    cmd->add_option("--worker", worker_.mode)->group("");
    cmd->add_option("--dir", worker_.dir)->group("");
    cmd->add_option("--victim", worker_.victim)->group("");
    cmd->add_option("--victim-fault", worker_.victim_fault)->group("");
    cmd->add_option("--shrink-path", worker_.shrink_path)->group("");
  }
  int Run() override;

 private:
  int RunSim();
  Status Drive(JsonLines* out);
  std::vector<std::string> JobArgs(int slots, int spares, const std::string& mode,
                                   const std::string& dir, const std::string& bytes) const;
  Status Bandwidth(std::map<uint64_t, nlohmann::json>* results);
  Status Failure(uint64_t bytes, nlohmann::json* result);
  Status Single(uint64_t bytes, nlohmann::json* result);
  Status Shrink(uint64_t bytes, const std::string& path, JsonLines* out);

  std::string backend_ = "gloo";
  int ranks_ = 4;
  std::string bytes_text_ = "1M,64M,256M";
  int rounds_ = 3;
  int gpus_ = 1;
  int heartbeat_timeout_ms_ = 500;
  bool no_failure_ = false;
  bool shrink_ = false;
  std::string dp_launch_;
  bool sim_ = false;
  std::string sim_ranks_ = "16,64,256";
  std::string sim_pairs_ = "all,ring";
  CommWorkerOptions worker_;
  CommBackend be_ = CommBackend::kGloo;
  std::vector<uint64_t> bytes_;
};

}  // namespace rtft::bench
