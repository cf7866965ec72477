// The NCCL backend's check of NCCL_ALGO and NCCL_PROTO at its first communicator (docs/comm.md,
// "Deterministic results"): rt-ft never writes the environment (dp-launch exports Ring and Simple
// before exec), so other values warn, and fail the communicator under
// RTFT_COMM_NCCL_DETERMINISTIC=1. The check comes before any CUDA call, so it runs without a GPU;
// it is made once per process, so each case runs in a child process of its own.
#include <cstdlib>

#include "comm/comm_test_util.h"
#include "core/build_config.h"
#include "core/params.h"

namespace rtft::comm::test {
namespace {

#if RTFT_WITH_NCCL

// Creates a one-rank NCCL communicator in a fresh process with this environment; the child exits
// with the status code of the creation (0 when it got past the check and failed for want of a
// device, or succeeded).
void ExpectCreateIn(const std::vector<std::pair<const char*, const char*>>& env, int want_code) {
  EXPECT_EXIT(
      {
        unsetenv("NCCL_ALGO");
        unsetenv("NCCL_PROTO");
        for (const auto& [name, value] : env) setenv(name, value, 1);
        ReloadParams();
        auto store = NewLocalCommStore();
        CommOptions o = Options(0, 1, store.get(), 1, "nccl-settings");
        o.backend = CommBackend::kNccl;
        auto c = Communicator::Create(o);
        const bool refused =
            !c.ok() && c.status().code() == StatusCode::kFailedPrecondition &&
            c.status().message().find("RTFT_COMM_NCCL_DETERMINISTIC=1") != std::string::npos;
        std::exit(refused ? static_cast<int>(StatusCode::kFailedPrecondition) : 0);
      },
      ::testing::ExitedWithCode(want_code), "");
}

TEST(NcclSettingsDeathTest, OtherAlgorithmsFailUnderTheStrictSettingAndOnlyWarnOtherwise) {
  const int refused = static_cast<int>(StatusCode::kFailedPrecondition);
  ExpectCreateIn({{"RTFT_COMM_NCCL_DETERMINISTIC", "1"}}, refused);  // unset
  ExpectCreateIn(
      {{"RTFT_COMM_NCCL_DETERMINISTIC", "1"}, {"NCCL_ALGO", "Tree"}, {"NCCL_PROTO", "Simple"}},
      refused);
  ExpectCreateIn(
      {{"RTFT_COMM_NCCL_DETERMINISTIC", "1"}, {"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}}, 0);
  ExpectCreateIn({{"NCCL_ALGO", "Tree"}}, 0);  // the default only warns
}

#else

TEST(NcclSettingsDeathTest, NeedsTheNcclBackend) { GTEST_SKIP() << "built without NCCL"; }

#endif

}  // namespace
}  // namespace rtft::comm::test
