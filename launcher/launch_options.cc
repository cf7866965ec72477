#include "launcher/launch_options.h"
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <sstream>

#include "core/params.h"
#include "launcher/gpu_slot.h"

namespace rtft::launch {
namespace {

// The flag's text when given, else the variable's (or its default).
StatusOr<int64_t> IntSetting(const std::string& flag, Param param, const char* name) {
  if (flag.empty()) return ParamInt(param);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(flag.c_str(), &end, 10);
  if (errno != 0 || end == flag.c_str() || *end != '\0')
    return Status::InvalidArgument(std::string("--") + name + " '" + flag + "' is not an integer");
  return static_cast<int64_t>(v);
}

std::string StringSetting(const std::string& flag, Param param) {
  return flag.empty() ? ParamString(param) : flag;
}

// A path setting; "none" (the default) means unset.
std::string PathSetting(const std::string& flag, Param param) {
  std::string path = StringSetting(flag, param);
  return path == "none" ? "" : path;
}

Status CheckRange(int64_t v, int64_t lo, int64_t hi, const char* name) {
  if (v < lo || v > hi)
    return Status::InvalidArgument(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got " + std::to_string(v));
  return Status::Ok();
}

}  // namespace

namespace {

// "text [RTFT_X, default]", from the one declaration of the setting (core/param_list.h), so the
// help cannot drift from the defaults actually used.
std::string Help(const std::string& text, Param param) {
  const ParamInfo& info = GetParamInfo(param);
  std::string help = text + " [" + info.env;
  if (std::string(info.default_value) != "none") help += std::string(", ") + info.default_value;
  return help + "]";
}

// "TxP", each degree 1 to 4096 (the ranks of a slot count bound their product anyway).
Status ParseGrid(const std::string& text, LaunchOptions* o) {
  const auto bad = Status::InvalidArgument("--grid '" + text +
                                           "': use TxP, the tensor and pipeline degrees (2x4)");
  const size_t x = text.find('x');
  if (x == std::string::npos || x == 0 || x + 1 >= text.size() || x > 4 || text.size() - x > 5)
    return bad;
  int64_t degree[2];
  const std::string part[2] = {text.substr(0, x), text.substr(x + 1)};
  for (int i = 0; i < 2; ++i) {
    if (part[i].find_first_not_of("0123456789") != std::string::npos) return bad;
    degree[i] = std::stoll(part[i]);
    if (degree[i] < 1 || degree[i] > 4096) return bad;
  }
  o->grid_tensor = static_cast<int32_t>(degree[0]);
  o->grid_pipeline = static_cast<int32_t>(degree[1]);
  return Status::Ok();
}

}  // namespace

void AddLaunchFlags(CLI::App* app, LaunchFlags* f) {
  app->add_option("--spares", f->spares,
                  Help("slots (the last ones) that start as warm spares", Param::kSpares));
  app->add_option("--coordinator-slot", f->coordinator_slot,
                  Help("shared | dedicated: slot 0 runs only the coordinator (no application)",
                       Param::kCoordinatorSlot));
  app->add_option("--standby-coordinator", f->standby_coordinator,
                  Help("auto | off: a standby in another slot takes over when slot 0 is lost",
                       Param::kStandbyCoordinator));
  app->add_option("--heartbeat-ms", f->heartbeat_ms,
                  Help("agent heartbeat period", Param::kHeartbeatMs));
  app->add_option("--heartbeat-timeout-ms", f->heartbeat_timeout_ms,
                  Help("a slot silent this long is lost", Param::kHeartbeatTimeoutMs));
  app->add_option(
      "--max-restarts-per-slot", f->max_restarts_per_slot,
      Help("restarts on the same slot before it is retired", Param::kMaxRestartsPerSlot));
  app->add_option("--on-spares-exhausted", f->on_spares_exhausted,
                  Help("shrink | checkpoint-and-exit | fail", Param::kOnSparesExhausted));
  app->add_option(
      "--grid", f->grid,
      Help("TxP: tensor x pipeline degrees; a shrink drops whole replicas", Param::kGrid));
  app->add_option(
      "--watchdog-s", f->watchdog_s,
      Help("kill an application without step progress this long, 0: off", Param::kWatchdogS));
  app->add_option(
      "--hang-k", f->hang_k,
      Help("a rank its peers wait for past k x the median step is hung, 0: off", Param::kHangK));
  app->add_option("--hang-min-ms", f->hang_min_ms,
                  Help("the least wait that makes a rank hung", Param::kHangMinMs));
  app->add_option(
      "--hang-first-step-s", f->hang_first_step_s,
      Help("the wait while no step time is known or in a long phase", Param::kHangFirstStepS));
  app->add_option("--straggler-pct", f->straggler_pct,
                  Help("a rank this many % slower than its peers' median is swapped, 0: off",
                       Param::kStragglerPct));
  app->add_option("--straggler-window", f->straggler_window,
                  Help("the steps a rank's work is compared over", Param::kStragglerWindow));
  app->add_option("--health-period-s", f->health_period_s,
                  Help("a spare checks its GPU and host when it starts and this often, 0: off",
                       Param::kHealthPeriodS));
  app->add_option("--health-timeout-s", f->health_timeout_s,
                  Help("a health check that runs longer fails", Param::kHealthTimeoutS));
  app->add_option(
      "--health-check", f->health_check,
      Help("the program that checks (run with --device N; exit 0: healthy)", Param::kHealthCheck));
  app->add_option("--log-level", f->log_level,
                  Help("error | warn | info | debug | trace", Param::kLogLevel));
  app->add_option("--job-key-file", f->job_key_file,
                  Help("the job's CURVE keys (0600); required under srun", Param::kJobKeyFile));
  app->add_option("--join-timeout-s", f->join_timeout_s,
                  Help("every slot must join within this", Param::kJoinTimeoutS));
  app->add_option(
      "--shutdown-grace-s", f->shutdown_grace_s,
      Help("time an application gets to exit after SIGTERM/shutdown", Param::kShutdownGraceS));
  app->add_option("--exit-code-file", f->exit_code_file,
                  Help("slot 0 writes the job's exit code here", Param::kExitCodeFile));
  app->add_option("--app-isolation", f->app_isolation,
                  Help("auto | pid-namespace | process-group", Param::kAppIsolation));
  app->add_option("--gpus-per-node", f->gpus_per_node,
                  Help("GPUs of each node (slot i of a node gets device i mod N), or auto",
                       Param::kGpusPerNode));
  app->add_flag("--print-config", f->print_config,
                "list every RTFT_* setting with its default and current value, then exit");
  app->add_option("command", f->command, "the application and its arguments (after --)");
}

StatusOr<LaunchOptions> ResolveOptions(const LaunchFlags& f) {
  LaunchOptions o;
  RTFT_ASSIGN_OR_RETURN(int64_t spares, IntSetting(f.spares, Param::kSpares, "spares"));
  RTFT_RETURN_IF_ERROR(CheckRange(spares, 0, control::kMaxSlots - 1, "--spares"));
  o.spares = static_cast<int32_t>(spares);
  const std::string where = StringSetting(f.coordinator_slot, Param::kCoordinatorSlot);
  if (where != "shared" && where != "dedicated")
    return Status::InvalidArgument("--coordinator-slot '" + where + "': use shared or dedicated");
  o.dedicated_coordinator = where == "dedicated";
  const std::string standby = StringSetting(f.standby_coordinator, Param::kStandbyCoordinator);
  if (standby != "auto" && standby != "off")
    return Status::InvalidArgument("--standby-coordinator '" + standby + "': use auto or off");
  o.standby_coordinator = standby == "auto";
  o.test_partition_file = ParamString(Param::kCtrlTestPartition);
  RTFT_ASSIGN_OR_RETURN(int64_t hb,
                        IntSetting(f.heartbeat_ms, Param::kHeartbeatMs, "heartbeat-ms"));
  RTFT_RETURN_IF_ERROR(CheckRange(hb, 1, 600000, "--heartbeat-ms"));
  o.heartbeat = std::chrono::milliseconds(hb);
  RTFT_ASSIGN_OR_RETURN(int64_t hbt, IntSetting(f.heartbeat_timeout_ms, Param::kHeartbeatTimeoutMs,
                                                "heartbeat-timeout-ms"));
  RTFT_RETURN_IF_ERROR(CheckRange(hbt, 2 * hb, 3600000, "--heartbeat-timeout-ms (>= 2 periods)"));
  o.heartbeat_timeout = std::chrono::milliseconds(hbt);
  RTFT_ASSIGN_OR_RETURN(int64_t mr, IntSetting(f.max_restarts_per_slot, Param::kMaxRestartsPerSlot,
                                               "max-restarts-per-slot"));
  RTFT_RETURN_IF_ERROR(CheckRange(mr, 0, 1000000, "--max-restarts-per-slot"));
  o.max_restarts_per_slot = static_cast<int32_t>(mr);
  const std::string policy = StringSetting(f.on_spares_exhausted, Param::kOnSparesExhausted);
  if (!control::ParsePolicy(policy, &o.on_spares_exhausted))
    return Status::InvalidArgument("--on-spares-exhausted '" + policy +
                                   "': use shrink, checkpoint-and-exit or fail");
  RTFT_RETURN_IF_ERROR(ParseGrid(StringSetting(f.grid, Param::kGrid), &o));
  RTFT_ASSIGN_OR_RETURN(int64_t wd, IntSetting(f.watchdog_s, Param::kWatchdogS, "watchdog-s"));
  RTFT_RETURN_IF_ERROR(CheckRange(wd, 0, 7 * 24 * 3600, "--watchdog-s"));
  o.watchdog = std::chrono::seconds(wd);
  RTFT_ASSIGN_OR_RETURN(int64_t hk, IntSetting(f.hang_k, Param::kHangK, "hang-k"));
  RTFT_RETURN_IF_ERROR(CheckRange(hk, 0, 1000000, "--hang-k"));
  o.hang.k = static_cast<int32_t>(hk);
  RTFT_ASSIGN_OR_RETURN(int64_t hmin, IntSetting(f.hang_min_ms, Param::kHangMinMs, "hang-min-ms"));
  RTFT_RETURN_IF_ERROR(CheckRange(hmin, 100, 24 * 3600 * 1000, "--hang-min-ms"));
  o.hang.min = std::chrono::milliseconds(hmin);
  RTFT_ASSIGN_OR_RETURN(
      int64_t hfirst, IntSetting(f.hang_first_step_s, Param::kHangFirstStepS, "hang-first-step-s"));
  RTFT_RETURN_IF_ERROR(CheckRange(hfirst, 1, 7 * 24 * 3600, "--hang-first-step-s"));
  o.hang.first_step = std::chrono::seconds(hfirst);
  RTFT_ASSIGN_OR_RETURN(int64_t spct,
                        IntSetting(f.straggler_pct, Param::kStragglerPct, "straggler-pct"));
  RTFT_RETURN_IF_ERROR(CheckRange(spct, 0, 100000, "--straggler-pct"));
  o.straggler.percent = static_cast<int32_t>(spct);
  RTFT_ASSIGN_OR_RETURN(
      int64_t swin, IntSetting(f.straggler_window, Param::kStragglerWindow, "straggler-window"));
  RTFT_RETURN_IF_ERROR(CheckRange(swin, 2, 1000000, "--straggler-window"));
  o.straggler.window = static_cast<int32_t>(swin);
  RTFT_ASSIGN_OR_RETURN(int64_t hp,
                        IntSetting(f.health_period_s, Param::kHealthPeriodS, "health-period-s"));
  RTFT_RETURN_IF_ERROR(CheckRange(hp, 0, 7 * 24 * 3600, "--health-period-s"));
  o.health_period = std::chrono::seconds(hp);
  RTFT_ASSIGN_OR_RETURN(int64_t ht,
                        IntSetting(f.health_timeout_s, Param::kHealthTimeoutS, "health-timeout-s"));
  RTFT_RETURN_IF_ERROR(CheckRange(ht, 1, 24 * 3600, "--health-timeout-s"));
  o.health_timeout = std::chrono::seconds(ht);
  o.health_check = PathSetting(f.health_check, Param::kHealthCheck);
  o.log_level = StringSetting(f.log_level, Param::kLogLevel);
  o.job_key_file = PathSetting(f.job_key_file, Param::kJobKeyFile);
  RTFT_ASSIGN_OR_RETURN(int64_t jt,
                        IntSetting(f.join_timeout_s, Param::kJoinTimeoutS, "join-timeout-s"));
  RTFT_RETURN_IF_ERROR(CheckRange(jt, 1, 24 * 3600, "--join-timeout-s"));
  o.join_timeout = std::chrono::seconds(jt);
  RTFT_ASSIGN_OR_RETURN(int64_t grace,
                        IntSetting(f.shutdown_grace_s, Param::kShutdownGraceS, "shutdown-grace-s"));
  RTFT_RETURN_IF_ERROR(CheckRange(grace, 0, 24 * 3600, "--shutdown-grace-s"));
  o.shutdown_grace = std::chrono::seconds(grace);
  o.exit_code_file = PathSetting(f.exit_code_file, Param::kExitCodeFile);
  const std::string isolation = StringSetting(f.app_isolation, Param::kAppIsolation);
  if (!ParseIsolationPolicy(isolation, &o.isolation))
    return Status::InvalidArgument("--app-isolation '" + isolation +
                                   "': use auto, pid-namespace or process-group");
  RTFT_ASSIGN_OR_RETURN(o.gpus_per_node,
                        ParseGpusPerNode(StringSetting(f.gpus_per_node, Param::kGpusPerNode)));
  o.command = f.command;
  return o;
}

std::string FormatConfig() {
  std::ostringstream out;
  for (const ParamInfo& p : AllParams()) {
    const char* env = std::getenv(p.env);
    out << p.env << "=" << ParamString(p.id) << "  (default '" << p.default_value << "'"
        << (env && *env ? ", from the environment" : "") << ")\n    " << p.description << "\n";
  }
  return out.str();
}

}  // namespace rtft::launch
