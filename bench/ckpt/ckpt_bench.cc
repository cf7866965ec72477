// `rtft-bench ckpt`: raw disk vs torch.save-like vs rt-ft on the same state and disk, as
// docs/benchmarks.md ("rtft-bench ckpt") asks. Variants run interleaved for every repeat
// (raw, naive, rtft, raw, ...) with the page cache dropped and the files deleted in between, so
// disk drift hits all three alike; the medians are reported. After each rt-ft run, the restore
// phase reads its version back (raw O_DIRECT read, Restore into host and GPU memory).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "bench/ckpt/ckpt_report.h"
#include "bench/ckpt/ckpt_state.h"
#include "bench/ckpt/ckpt_variants.h"
#include "bench/common/bench_command.h"
#include "bench/common/bench_plot.h"
#include "bench/common/bench_util.h"
#include "bench/common/gpu_util.h"
#include "core/params.h"

namespace rtft::bench {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
// Few large tensors up to thousands of small ones (coalesced by the CompositeProvider).
const std::vector<uint64_t> kSweepTensors = {4, 64, 1024, 8192};

struct CkptPlan {
  std::vector<StateSpec> specs;
  VariantConfig variant;
  int repeat = 1;
};

class CkptCommand : public BenchCommand {
 public:
  const char* name() const override { return "ckpt"; }
  const char* help() const override {
    return "checkpoint engine: raw O_DIRECT vs naive (torch.save-like) vs rt-ft";
  }
  void AddFlags(CLI::App* cmd) override;
  int Run() override;

 private:
  StatusOr<CkptPlan> MakePlan() const;
  Status Measure(const CkptPlan& plan, const std::string& scratch, JsonLines* out) const;
  StatusOr<CkptMeasurements> MeasureOne(const StateSpec& spec, const CkptPlan& plan,
                                        double pcie_gbps) const;

  std::string dir_ = "/var/tmp";
  bool keep_ = false;
  std::string bytes_ = "4G";  // about a minute on a 2-core VM with a ~2.5 GB/s disk
  uint64_t tensors_ = 64;
  std::string state_ = "host";
  int repeat_ = 3;
  std::string plot_;
  std::string pool_bytes_;
  int flush_threads_ = 0;
  std::string io_ = "auto";
  bool sweep_ = false;
  std::string sweep_bytes_;
  std::string sweep_tensors_;
};

void CkptCommand::AddFlags(CLI::App* cmd) {
  cmd->add_option("--dir", dir_, "parent of the scratch directory (selects the disk under test)")
      ->capture_default_str();
  cmd->add_flag("--keep", keep_,
                "keep the scratch directory and the files of the last rt-ft run in it");
  cmd->add_option("--bytes", bytes_, "state size (K/M/G suffixes); with --sweep, the largest")
      ->capture_default_str();
  cmd->add_option("--tensors", tensors_, "number of tensors the state is split into")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--state", state_, "where the state lives")
      ->capture_default_str()
      ->check(CLI::IsMember({"host", "gpu"}));
  cmd->add_option("--repeat", repeat_, "runs per variant; the median is reported")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plot", plot_, "also write the JSON lines next to FILE.png and draw a chart");
  cmd->add_option("--pool-bytes", pool_bytes_,
                  "rt-ft pinned pool (default: holds the state; 'engine': the engine's own "
                  "default, RTFT_CKPT_POOL_BYTES)");
  cmd->add_option("--flush-threads", flush_threads_,
                  "rt-ft flush threads, also the raw writer's threads (default: "
                  "RTFT_CKPT_FLUSH_THREADS)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--io", io_, "rt-ft I/O backend")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "uring", "posix"}));
  cmd->add_flag("--sweep", sweep_,
                "sizes from 1G doubling up to --bytes, times tensor counts 4,64,1024,8192");
  cmd->add_option("--sweep-bytes", sweep_bytes_, "with --sweep: sizes, e.g. 1G,4G,16G");
  cmd->add_option("--sweep-tensors", sweep_tensors_, "with --sweep: tensor counts, e.g. 4,4096");
}

StatusOr<CkptPlan> CkptCommand::MakePlan() const {
  CkptPlan plan;
  plan.repeat = repeat_;
  plan.variant.io = io_;
  plan.variant.flush_threads = flush_threads_;
  if (pool_bytes_ == "engine") {
    plan.variant.engine_pool = true;
  } else if (!pool_bytes_.empty()) {
    RTFT_ASSIGN_OR_RETURN(plan.variant.pool_bytes, ParseBytes(pool_bytes_));
  }
  RTFT_ASSIGN_OR_RETURN(uint64_t bytes, ParseBytes(bytes_));
  std::vector<uint64_t> sizes = {bytes};
  std::vector<uint64_t> counts = {tensors_};
  if (sweep_) {
    counts = kSweepTensors;
    sizes.clear();
    for (uint64_t b = kGiB; b < bytes; b *= 2) sizes.push_back(b);
    sizes.push_back(bytes);
    if (!sweep_bytes_.empty()) {
      RTFT_ASSIGN_OR_RETURN(sizes, ParseByteList(sweep_bytes_));
    }
    if (!sweep_tensors_.empty()) {
      RTFT_ASSIGN_OR_RETURN(counts, ParseCountList(sweep_tensors_));
    }
  }
  const bool gpu = state_ == "gpu";
  if (gpu) RTFT_RETURN_IF_ERROR(CheckGpuUsable().Annotate("--state gpu"));
  for (uint64_t b : sizes)
    for (uint64_t n : counts) {
      if (b / sizeof(float) < n)
        return Status::InvalidArgument(FormatBytes(b) + " cannot hold " + std::to_string(n) +
                                       " float32 tensors");
      plan.specs.push_back(StateSpec{b, n, gpu});
    }
  return plan;
}

StatusOr<CkptMeasurements> CkptCommand::MeasureOne(const StateSpec& spec, const CkptPlan& plan,
                                                   double pcie_gbps) const {
  Progress("state: " + FormatBytes(spec.bytes) + " in " + std::to_string(spec.tensors) + " " +
           (spec.gpu ? "device" : "host") + " tensors");
  RTFT_ASSIGN_OR_RETURN(std::unique_ptr<BenchState> state, BenchState::Create(spec));
  CkptMeasurements m;
  m.bytes = state->bytes();
  m.tensors = spec.tensors;
  m.gpu = spec.gpu;
  m.pcie_gbps = pcie_gbps;
  m.page_cache_dropped = true;
  // Restore into GPU memory is measured wherever a GPU can be used, whatever --state says.
  m.gpu_restore = CheckGpuUsable().ok();
  auto note = [&](int r, const char* v, const VariantResult& x) {
    Progress("  run " + std::to_string(r + 1) + "/" + std::to_string(plan.repeat) + " " + v +
             ": blocking " + std::to_string(x.blocking_s) + " s, persist " +
             std::to_string(Gbps(m.bytes, x.persist_s)) + " GB/s (" + x.io +
             (x.direct_io ? ", O_DIRECT)" : ")"));
  };
  for (int r = 0; r < plan.repeat; ++r) {
    m.page_cache_dropped &= DropPageCache();
    RTFT_ASSIGN_OR_RETURN(VariantResult raw, RunRaw(m.bytes, plan.variant));
    note(r, "raw  ", raw);
    m.raw.push_back(raw);
    m.page_cache_dropped &= DropPageCache();
    RTFT_ASSIGN_OR_RETURN(VariantResult naive, RunNaive(*state, plan.variant));
    note(r, "naive", naive);
    m.naive.push_back(naive);
    m.page_cache_dropped &= DropPageCache();
    RTFT_ASSIGN_OR_RETURN(VariantResult rt, RunRtft(*state, plan.variant));
    note(r, "rtft ", rt);
    m.rtft.push_back(rt);
    RTFT_ASSIGN_OR_RETURN(RestoreResult back, RunRestore(*state, plan.variant, m.gpu_restore));
    Progress("  run " + std::to_string(r + 1) + "/" + std::to_string(plan.repeat) +
             " restore: raw read " + std::to_string(Gbps(back.raw_read_bytes, back.raw_read_s)) +
             " GB/s, into host " + std::to_string(Gbps(m.bytes, back.restore_s)) + " GB/s" +
             (m.gpu_restore
                  ? "; raw read " +
                        std::to_string(Gbps(back.raw_read_bytes, back.raw_read_device_s)) +
                        " GB/s, into GPU " + std::to_string(Gbps(m.bytes, back.restore_device_s)) +
                        " GB/s"
                  : std::string()) +
             (back.page_cache_evicted ? "" : " (page cache NOT evicted)"));
    m.restore.push_back(back);
  }
  return m;
}

Status CkptCommand::Measure(const CkptPlan& plan, const std::string& scratch,
                            JsonLines* out) const {
  CkptPlan p = plan;
  p.variant.dir = scratch;
  double pcie_gbps = 0;
  if (!p.specs.empty() && p.specs.front().gpu) {
    uint64_t largest = 0;
    for (const StateSpec& s : p.specs) largest = std::max(largest, s.bytes);
    RTFT_ASSIGN_OR_RETURN(pcie_gbps, PinnedD2HGbps(std::min(largest, kGiB)));
    Progress("pinned D2H bandwidth: " + std::to_string(pcie_gbps) + " GB/s");
  }
  for (const StateSpec& spec : p.specs) {
    RTFT_ASSIGN_OR_RETURN(CkptMeasurements m, MeasureOne(spec, p, pcie_gbps));
    EmitCkptResults(m, out);
  }
  return Status::Ok();
}

int CkptCommand::Run() {
  StatusOr<CkptPlan> plan = MakePlan();
  if (!plan.ok()) {
    std::cerr << "rtft-bench ckpt: " << plan.status() << "\n";
    return kExitUsage;
  }
  Status st = EnsureDir(dir_);
  StatusOr<std::string> scratch = st.ok() ? MakeScratchDir(dir_) : StatusOr<std::string>(st);
  if (!scratch.ok()) {
    std::cerr << "rtft-bench ckpt: " << scratch.status() << "\n";
    return kExitFailed;
  }
  Progress("writing under " + *scratch);
  JsonLines out;
  st = Measure(*plan, *scratch, &out);
  if (keep_) {
    VariantConfig last;
    last.dir = *scratch;
    Progress("kept " + *scratch + "; the last rt-ft run's version is in " + RtftDir(last) +
             " (rtft-ckpt ls/verify it, Restore() reads it)");
  } else {
    Status removed = RemoveTree(*scratch);
    if (!removed.ok()) std::cerr << "rtft-bench ckpt: " << removed << "\n";
  }
  if (!st.ok()) {
    std::cerr << "rtft-bench ckpt: " << st << "\n";
    return kExitFailed;
  }
  if (!plot_.empty()) WritePlot(plot_, out.lines());
  return kExitOk;
}

}  // namespace

std::unique_ptr<BenchCommand> NewCkptCommand() { return std::make_unique<CkptCommand>(); }

}  // namespace rtft::bench
