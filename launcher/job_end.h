// How a job's ending is reported: its exit code in --exit-code-file and as the line
// `dp-launch: job exit code N` on stderr (mpirun --enable-recovery exits 0 whatever happened, so
// these are the job's word). Slot 0 reports every ending it sees; another slot reports only when
// slot 0 cannot: the bootstrap never completed, slot 0 was lost, or the slot's own options were
// refused before the bootstrap (docs/launcher.md "Exit codes"). Also the bootstrap watchdog.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "core/thread.h"
#include "rtft/status.h"

namespace rtft::launch {

// dp-launch's own exit codes (the application's codes pass through unchanged).
constexpr int kExitJobFailed = 1;  // the job could not start or go on
constexpr int kExitUsage = 2;      // bad usage: options, key file, application, launcher
constexpr int kExitNoStart = 127;  // the application could not be restarted

// kExitUsage for errors in what the user gave (options, files, the application, a dp-launch of
// the wrong MPI), kExitJobFailed for the rest.
int ExitCodeFor(const Status& status);

class JobEndReport {
 public:
  // `slot`: this process's slot as the launcher numbers it (-1: unknown).
  JobEndReport(std::string exit_code_file, int slot)
      : path_(std::move(exit_code_file)), slot_(slot) {}
  int slot() const { return slot_; }
  // The primary coordinator's verdict at the normal end of the job (slot 0's, or a standby's that
  // took over): replaces any code written before.
  void Final(int code) const;
  // An ending seen by one slot alone: writes the code unless one is there already, and prints
  // the code the file holds. Returns it.
  int IfFirst(int code) const;

 private:
  void Print(int code, bool final) const;

  std::string path_;
  int slot_;
};

// Ends the process (exit code 1, with a message and the report) when the bootstrap has not
// completed `limit` after the start: MPI_Init and the bootstrap's collectives take no timeout,
// so a slot lost during start-up would hold every other slot, and mpirun, forever.
class BootstrapWatchdog {
 public:
  BootstrapWatchdog(std::chrono::seconds limit, const JobEndReport& report);
  ~BootstrapWatchdog();  // disarms
  void Disarm();

 private:
  void Run();

  const std::chrono::seconds limit_;
  const JobEndReport report_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  Thread thread_;
};

}  // namespace rtft::launch
