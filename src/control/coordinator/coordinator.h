// The coordinator: runs in slot 0's dp-launch on its own thread, beside slot 0's agent or, with
// --coordinator-slot dedicated, alone. It owns the
// membership table, epochs, the spare pool, failure classification (docs/architecture.md table),
// the key-value store (Gloo rendezvous, NCCL unique ids) and the broadcast of events to agents.
// Transport: ZeroMQ ROUTER socket with CURVE; messages as in docs/control-protocol.md.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "control/coordinator/hang_detector.h"
#include "control/coordinator/straggler_detector.h"
#include "control/wire/codec.h"
#include "control/wire/keys.h"
#include "control/wire/types.h"
#include "rtft/status.h"

namespace rtft::control {

struct CoordinatorOptions {
  std::string bind_host = "*";  // interface to bind; the port is chosen by the kernel
  std::string advertise_host;   // host name agents use to reach it (default: gethostname)
  JobKeys keys;
  int32_t slots = 1;   // dp-launch processes in the job
  int32_t spares = 0;  // the last `spares` slots start as spares
  // Slot 0 runs only this coordinator (--coordinator-slot dedicated): it has no agent and holds
  // no rank; ranks start at slot 1.
  bool dedicated_slot = false;
  // A slot whose agent sent nothing for this long is lost (permanent failure).
  std::chrono::milliseconds heartbeat_timeout{1000};
  // Every slot must say hello within this; slots still missing then are treated as lost.
  std::chrono::milliseconds join_timeout{60000};
  // The primary's hang detector (docs/protect.md, "Hangs").
  HangOptions hang;
  // The primary's straggler detector (docs/protect.md, "Stragglers").
  StragglerOptions straggler;
  int32_t max_restarts_per_slot = 3;
  SparesExhaustedPolicy on_spares_exhausted = SparesExhaustedPolicy::kCheckpointAndExit;
  // The job's tensor x pipeline degrees (TableOptions): a shrink drops whole replicas.
  int32_t grid_tensor = 1;
  int32_t grid_pipeline = 1;
  // A connection that has not completed its CURVE handshake this long is dropped (libzmq's
  // default is 30 s, during which a stranger's idle connection holds a descriptor).
  std::chrono::milliseconds handshake_timeout{5000};
  // At most this many connections in their handshake at once; more are closed as they are
  // accepted. 0: from the descriptor limit (PendingConnectionBudget in connection_guard.h).
  int32_t max_pending_connections = 0;
  // The slot whose dp-launch runs this coordinator (slot 0 for the job's first primary).
  SlotId self_slot = 0;
  // Start as a standby: it listens, but decides nothing until a primary copies its state to it;
  // it takes over when it and a majority of the live agents lost that primary.
  bool standby = false;
  // As primary, keep a standby in another slot (from the endpoints the agents' hellos carry):
  // every change reaches it before the primary answers. Needs three slots with an agent or more.
  bool replicate = false;
  // Test hook (RTFT_CTRL_TEST_PARTITION): while this file exists, the primary drops all traffic
  // from and to the slots it lists (comma-separated), as a partition would; read every 100 ms.
  std::string partition_file;
  // Fault seam for tests: called at the top of every round of the coordinator's thread; what it
  // throws must end the thread with a recorded error, never the process.
  std::function<void()> fault_point;
};

// Counters for tests and rtft-bench detect --sim.
struct CoordinatorStats {
  uint64_t messages = 0;  // well-formed messages handled
  uint64_t heartbeats = 0;
  uint64_t rejected_messages = 0;   // malformed, oversized, or from the wrong sender (logged)
  uint64_t rejected_peers = 0;      // connections refused: unknown key, failed handshake (logged)
  uint64_t closed_connections = 0;  // closed as accepted: too many in their handshake (logged)
  uint64_t epoch = 0;
  // When the current epoch was declared (steady clock), and when its broadcast was queued on
  // every agent's connection.
  std::chrono::steady_clock::time_point epoch_declared_at{};
  std::chrono::steady_clock::time_point epoch_sent_at{};
  double thread_cpu_seconds = 0;  // the coordinator thread (not libzmq's I/O thread)
  bool primary = false;           // deciding (the first primary, or a standby that took over)
  bool fenced = false;            // a newer primary took over, or it stepped down
  Generation generation = 0;      // the primary's (for a standby: the one it follows)
  SlotId standby_slot = -1;       // the primary's standby in sync (-1: none)
  bool synced = false;            // a standby: holds a complete copy of the primary's state
  uint64_t takeovers = 0;         // this coordinator took over from its primary
};

// libzmq names the coordinator's I/O thread "<prefix>/ZMQbg/IO/0" (rtft-bench measures its CPU).
constexpr int kCoordinatorZmqThreadPrefix = 71;

class Coordinator {
 public:
  static StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  virtual ~Coordinator() = default;  // stops the thread

  // "tcp://host:port" for agents.
  virtual std::string endpoint() const = 0;
  // A snapshot of the current membership (tests, progress output).
  virtual Membership membership() const = 0;
  // Blocks until the job is over and returns its exit code: 0 when every logical rank's
  // application exited 0 (or the checkpoint-and-exit policy completed), else the first failing
  // application's code, or 1 when the job could not go on (spares exhausted with `fail`).
  virtual int WaitJobEnd() = 0;
  // WaitJobEnd with a deadline: nullopt when the job is still running after `timeout`.
  virtual std::optional<int> WaitJobEndFor(std::chrono::milliseconds timeout) = 0;
  // Ok while the coordinator's thread runs; the error that ended it otherwise (the job then
  // ends with exit code 1: WaitJobEnd returns).
  virtual Status error() const = 0;
  // It decides for the job now: the first primary, or a standby that took over.
  virtual bool is_primary() const = 0;
  // A newer primary took over from it, or it stepped down (it lost its standby and most agents):
  // WaitJobEnd has returned 1, and this process must not report the job's exit code.
  virtual bool fenced() const = 0;
  virtual CoordinatorStats stats() const = 0;
};

}  // namespace rtft::control
