// One checkpoint version as it moves through the engine (engine.h): what is saved, where it goes,
// and how far it got. Its stage is one explicit state that only moves forward, moved only by the
// engine under its mutex; counters say how many capture units each thread has dealt with.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/capture/capture_plan.h"
#include "checkpoint/layout/layout.h"
#include "rtft/checkpoint.h"

namespace rtft::internal {

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct TensorState {
  TensorDesc desc;
  uint64_t file_offset = 0;
  std::vector<uint64_t> xxh3;  // one per chunk; filled by the flush threads
};

// A version's life. A failure does not skip stages: the version still drains (its pool spans are
// released, its temporary file removed) and reaches kDone with `error` set; waiters see the error
// as soon as it is recorded.
enum class VersionStage {
  kCapturing,   // units are being copied into the pool; the file's skeleton may not exist yet
  kCaptured,    // every unit is in the pool (WaitCaptured returns); units are still being written
  kFinalizing,  // every unit is written and released: manifest, fsync, rename on the file thread
  kCommitting,  // rank 0 only: the file is durable; MANIFEST.json and LATEST on the commit thread
  kDone,        // persisted (and committed on rank 0), or failed
};

const char* VersionStageName(VersionStage stage);

struct Version {
  uint64_t version = 0;
  std::vector<TensorState> tensors;
  std::vector<ObjectBlob> object_blobs;     // serialized inside Checkpoint()
  std::vector<ObjectEntry> object_entries;  // where the skeleton put them
  std::vector<PlannedUnit> units;
  // Copies made inside Checkpoint() of the tensors the next compute changes
  // (TensorDesc::changed_in_compute): their TensorState reads these, not the caller's memory.
  std::vector<std::unique_ptr<char[]>> early_copies;
  std::string tmp_path;
  std::string final_path;
  Clock::time_point start;
  VersionMarks marks;                  // given to Checkpoint(), written into the file's manifest
  std::atomic<bool> direct_io{false};  // some flush thread got O_DIRECT for this file

  // Guarded by the engine's mutex.
  VersionStage stage = VersionStage::kCapturing;
  Status error;  // the first error; set at any stage
  // The file thread created the file with its datasets (or failed to): flush threads wait for it
  // before writing, and finalizing waits for it. It runs beside capture, not in sequence.
  bool skeleton_done = false;
  size_t units_captured = 0;  // copied into the pool, or skipped after an error
  size_t units_released = 0;  // written (or skipped) and their pool span released
  CheckpointStats stats;

  bool captured() const { return stage >= VersionStage::kCaptured; }
  bool done() const { return stage == VersionStage::kDone; }
};

}  // namespace rtft::internal
