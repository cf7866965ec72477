#include "bench/comm/comm_bench.h"
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <map>

#include "bench/comm/comm_command.h"
#include "bench/common/bench_job.h"
#include "bench/common/bench_util.h"
#include "core/params.h"
#include "sim/comm_sim.h"

namespace rtft::bench {

Status CommCommand::Drive(JsonLines* out) {
  std::map<uint64_t, nlohmann::json> results;
  RTFT_RETURN_IF_ERROR(Bandwidth(&results));
  bool all_met = true;
  for (uint64_t bytes : bytes_) {
    nlohmann::json line = {{"name", "comm"},       {"backend", backend_}, {"ranks", ranks_},
                           {"bytes", bytes},       {"op", "allreduce"},   {"abort_ms", nullptr},
                           {"rebuild_ms", nullptr}};
    line.update(results[bytes]);
    if (!no_failure_) {
      if (ranks_ >= 2) {
        RTFT_RETURN_IF_ERROR(Failure(bytes, &line));
      } else {
        RTFT_RETURN_IF_ERROR(Single(bytes, &line));
      }
    }
    nlohmann::json met;
    if (bytes >= (64ull << 20) && ranks_ > 1) met["busbw"] = line["ratio"].get<double>() >= 0.95;
    if (!line["abort_ms"].is_null() && be_ == CommBackend::kGloo)
      met["abort_ms"] = line["abort_ms"].get<double>() <= 50;
    if (!line["rebuild_ms"].is_null() && ranks_ <= 4)
      met["rebuild_ms"] = line["rebuild_ms"].get<double>() <= 1000;
    for (auto& [k, v] : met.items()) all_met = all_met && v.get<bool>();
    line["targets"] = {{"busbw_ratio_min", 0.95}, {"abort_ms_max", 50}, {"rebuild_ms_max", 1000}};
    line["met"] = met;
    out->Emit(line);
  }
  if (shrink_ && be_ == CommBackend::kNccl && ranks_ >= 2)
    for (const char* path : {"revoke", "abort"})
      RTFT_RETURN_IF_ERROR(Shrink(bytes_.front(), path, out));
  out->Emit({{"name", "comm"}, {"summary", true}, {"all_met", all_met}});
  return Status::Ok();
}

int CommCommand::RunSim() {
  CommSimOptions o;
  o.repeats = rounds_;
  auto ranks = ParseCountList(sim_ranks_);
  if (!ranks.ok() || ranks->empty() || rounds_ < 1) {
    Progress("comm --sim: bad --sim-ranks or --rounds");
    return kExitUsage;
  }
  for (uint64_t n : *ranks) {
    if (n < 2 || n > 4096) {
      Progress("comm --sim: rank counts must be in [2, 4096]");
      return kExitUsage;
    }
  }
  o.ranks = *ranks;
  auto pairs = ParseChoiceList(sim_pairs_, {"all", "ring"});
  if (!pairs.ok()) {
    Progress("comm --sim: --sim-pairs takes all and ring, comma-separated");
    return kExitUsage;
  }
  o.pairs = *pairs;
  JsonLines out;
  const Status s = RunCommSim(o, &out);
  if (!s.ok()) {
    Progress("comm --sim: " + s.ToString());
    return kExitFailed;
  }
  return kExitOk;
}

int CommCommand::Run() {
  if (sim_) return RunSim();
  if (!ParseCommBackend(backend_, &be_)) {
    Progress("comm: --backend must be gloo or nccl");
    return kExitUsage;
  }
  auto bytes = ParseByteList(bytes_text_);
  if (!bytes.ok() || bytes->empty()) {
    Progress("comm: --bytes: " + bytes.status().ToString());
    return kExitUsage;
  }
  bytes_ = *bytes;
  if (!worker_.mode.empty()) {
    worker_.backend = be_;
    worker_.bytes = bytes_;
    worker_.rounds = rounds_;
    worker_.gpus = gpus_;
    return RunCommWorker(worker_);
  }
  if (!CommBackendAvailable(be_)) {
    Progress("comm: this build has no " + backend_ + " backend");
    return kExitUsage;
  }
  if (ranks_ < 1 || rounds_ < 1 || gpus_ < 1) {
    Progress("comm: --ranks, --rounds and --gpus must be positive");
    return kExitUsage;
  }
  if (be_ == CommBackend::kNccl && ranks_ > gpus_) {
    Progress("comm: NCCL needs one GPU per rank (--ranks " + std::to_string(ranks_) + ", --gpus " +
             std::to_string(gpus_) + ")");
    return kExitUsage;
  }
  if (dp_launch_.empty()) dp_launch_ = NextToSelf("dp-launch");
  if (access(dp_launch_.c_str(), X_OK) != 0) {
    Progress("comm: " + dp_launch_ + " is not built");
    return kExitUsage;
  }
  JsonLines out;
  const Status s = Drive(&out);
  if (!s.ok()) {
    Progress("comm: " + s.ToString());
    return kExitFailed;
  }
  return kExitOk;
}

std::unique_ptr<BenchCommand> NewCommCommand() { return std::make_unique<CommCommand>(); }

}  // namespace rtft::bench
