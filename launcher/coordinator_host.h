// What the dp-launch that hosts the job's coordinator does once its own agent is done (or, with
// --coordinator-slot dedicated, from the start): it keeps the coordinator until the job is over,
// lets the last broadcast go out, and reports the job's exit code (docs/launcher.md "Exit
// codes"). Used by main.cc.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "control/coordinator/coordinator.h"
#include "launcher/job_end.h"
#include "launcher/launch_env.h"
#include "launcher/launch_options.h"

namespace rtft::launch {

// Waits for the end of the job (only until `gone_by` less a margin, after a signal: the other
// slots' reports may never come), lingers for the last broadcast, stops the coordinator and
// writes the final code. Returns it; `fallback` when the job did not end in time. A coordinator
// fenced meanwhile reports nothing (Fenced).
int FinishAsCoordinator(std::unique_ptr<control::Coordinator> coordinator,
                        std::optional<std::chrono::steady_clock::time_point> gone_by, int fallback,
                        const LaunchOptions& options, const LaunchEnv& env,
                        const JobEndReport& report);

// A slot whose coordinator a newer primary replaced (it was stopped or cut off, and came back):
// it says so and ends with 1, leaving the job's exit code to the new primary's slot.
int Fenced(int slot);

// Slot 0 of --coordinator-slot dedicated: no agent and no application, only the coordinator,
// until the job ends. SIGINT/SIGTERM/SIGHUP bound the wait as they bound an agent's: the grace
// plus one second.
int RunDedicatedCoordinator(std::unique_ptr<control::Coordinator> coordinator,
                            const LaunchOptions& options, const LaunchEnv& env,
                            const JobEndReport& report);

}  // namespace rtft::launch
