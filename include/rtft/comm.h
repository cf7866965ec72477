// Communicators that survive a failed peer. One interface over two backends: Gloo (host memory;
// rt-ft's own ring collectives on Gloo's TCP pairs) and NCCL (GPU memory; calls are enqueued on a
// CUDA stream). Every blocking call has a deadline and returns a Status whose code says what to
// do; Abort() may be called from any thread and makes a call in flight return kAborted at once.
// A communicator belongs to one epoch of the job: after a failure the next epoch builds new ones
// (docs/comm.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rtft/export.h"
#include "rtft/state.h"
#include "rtft/status.h"

namespace rtft {

// The backends and the reductions: rtft/enum_list.h.
enum class CommBackend : uint8_t {
#define RTFT_COMM_BACKEND(id, name, value, text) id = value,
#include "rtft/enum_list.h"
#undef RTFT_COMM_BACKEND
};
// "gloo", "nccl".
RTFT_EXPORT const char* CommBackendName(CommBackend backend);
RTFT_EXPORT bool ParseCommBackend(const std::string& name, CommBackend* backend);
// Whether this build of librt-ft has the backend (RTFT_WITH_GLOO, RTFT_WITH_NCCL).
RTFT_EXPORT bool CommBackendAvailable(CommBackend backend);

enum class ReduceOp : uint8_t {
#define RTFT_REDUCE_OP(id, name, value, text) id = value,
#include "rtft/enum_list.h"
#undef RTFT_REDUCE_OP
};
// "sum", "avg", "max", "min".
RTFT_EXPORT const char* ReduceOpName(ReduceOp op);

using CommClock = std::chrono::steady_clock;

// Where communicators of one epoch meet: each rank puts its address under a key and gets the
// others'. rtft::Runtime provides one over the job's key-value store; NewLocalCommStore() is an
// in-process one (threads of one process, the standalone runtime). Implementations must be
// thread-safe.
class RTFT_EXPORT CommStore {
 public:
  virtual ~CommStore();
  virtual Status Put(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists; kDeadlineExceeded when `deadline` passes first.
  virtual StatusOr<std::string> Get(const std::string& key, CommClock::time_point deadline) = 0;
};
RTFT_EXPORT std::unique_ptr<CommStore> NewLocalCommStore();

// Failure events reach communicators through an AbortRegistry: a communicator of epoch E
// subscribes its Abort(), and the registry calls it as soon as it learns of any epoch after E.
// rtft::Runtime owns one, fed by the job's failure events, so every communicator created with it
// is aborted at a failure without the application remembering to do it.
//
// Lifetime rules: `abort` is called at most once, from the thread that delivers the event (or
// inside Subscribe, when the registry is already past `epoch`), so it must be short and must not
// block (Communicator::Abort is both). After Unsubscribe(token) returns, that `abort` is not
// running and is never called again; a communicator unsubscribes in its destructor. The registry
// must outlive every subscription.
class RTFT_EXPORT AbortRegistry {
 public:
  using Token = uint64_t;
  virtual ~AbortRegistry();
  virtual Token Subscribe(uint64_t epoch, std::function<void()> abort) = 0;
  virtual void Unsubscribe(Token token) = 0;
  // The newest epoch the registry has heard of.
  virtual uint64_t epoch() const = 0;
};

// A registry that the owner advances by hand: Advance(E) aborts every subscriber of an epoch
// before E. Thread-safe; what rtft::Runtime uses.
class RTFT_EXPORT EpochAbortRegistry final : public AbortRegistry {
 public:
  explicit EpochAbortRegistry(uint64_t epoch = 0);
  ~EpochAbortRegistry() override;
  Token Subscribe(uint64_t epoch, std::function<void()> abort) override;
  void Unsubscribe(Token token) override;
  uint64_t epoch() const override;
  // Moves to `epoch` (never backwards) and calls the abort of every older subscriber.
  void Advance(uint64_t epoch);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct CommOptions {
  CommBackend backend = CommBackend::kGloo;
  int rank = 0;
  int world_size = 1;
  uint64_t epoch = 0;
  // Tells communicators of one epoch apart ("train", "replica"): 1 to 64 of [A-Za-z0-9_.-].
  std::string name = "default";
  // Required when world_size > 1. Keys are namespaced by (epoch, name); only this epoch's keys
  // are read. Used only during Create().
  CommStore* store = nullptr;
  // Optional; must outlive the communicator. A registry already past `epoch` makes Create()
  // fail with kAborted (the epoch is stale).
  AbortRegistry* aborts = nullptr;
  // How long Create() waits for every peer; 0: RTFT_COMM_CREATE_TIMEOUT_MS.
  std::chrono::milliseconds create_timeout{0};
  // Default deadline of every call; 0: RTFT_COMM_TIMEOUT_MS.
  std::chrono::milliseconds timeout{0};
  // NCCL: the CUDA device of this rank.
  int device = 0;
  // Gloo: the address or host name to listen on; empty: RTFT_COMM_GLOO_HOST, or this host's name.
  std::string host;
  // The job rank of each of its ranks (world_size of them): its calls then count for the hang
  // detector as the step's (docs/protect.md, "Hangs"), as the Protector's own communicators' do.
  // For a communicator the step's collectives run on (rtft.torch's groups of listed ranks: HSDP's
  // shard and replica groups). Gloo only: an NCCL communicator is never watched. Empty: not
  // watched, as an application's own communicator.
  std::vector<int> job_ranks;
};

struct CallOptions {
  // This call's deadline, from now; 0: the communicator's default.
  std::chrono::milliseconds timeout{0};
  // NCCL: the cudaStream_t the call is enqueued on (nullptr: the legacy default stream).
  void* stream = nullptr;
};

// Buffers are host memory (Gloo) or device memory of the communicator's device (NCCL); `count`
// is in elements of `dtype` (float32, float16, bfloat16, int8, int32, int64, uint8, float64). Send
// and receive buffers may be the same (in place) where the call has one of each, except that
// AllGather(V)'s and ReduceScatter(V)'s send buffer must be this rank's slice of, or disjoint
// from, the receive buffer.
//
// Results are deterministic: for a given backend and world size, every collective gives the same
// bytes on every run and on every rank (docs/comm.md gives the reduction order, and for NCCL the
// settings it needs).
//
// Errors: kAborted: a peer failed, or Abort() was called (from a failure event or by hand): build
// the next epoch's communicator. kDeadlineExceeded: the call's deadline passed; the communicator
// is then unusable too (Gloo closes every connection on a timeout). kInvalidArgument: a bad call,
// or ranks that disagree on the call (different sizes, types, roots): detected where the data
// says so, and reported as a clear error rather than a hang. After any error but
// kInvalidArgument found before anything was sent, every later call returns kAborted.
//
// One call at a time per communicator; Abort() is the exception and may come from any thread.
class RTFT_EXPORT Communicator {
 public:
  // Builds the communicator of `options.epoch` with every rank of the epoch: blocks until all
  // ranks have called Create() (or the create timeout passes: kDeadlineExceeded, or an abort of
  // the epoch: kAborted).
  static StatusOr<std::unique_ptr<Communicator>> Create(const CommOptions& options);
  virtual ~Communicator();

  virtual CommBackend backend() const = 0;
  // kHost (Gloo) or kDevice (NCCL).
  virtual MemoryKind memory() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual uint64_t epoch() const = 0;
  virtual const std::string& name() const = 0;

  virtual Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                           const CallOptions& call = {}) = 0;
  virtual Status Broadcast(void* buffer, size_t count, DType dtype, int root,
                           const CallOptions& call = {}) = 0;
  // recv holds world_size * count elements, rank r's at r * count.
  virtual Status AllGather(const void* send, void* recv, size_t count, DType dtype,
                           const CallOptions& call = {}) = 0;
  // Rank r contributes counts[r] elements; recv holds their sum, rank r's after those of ranks
  // 0..r-1.
  virtual Status AllGatherV(const void* send, void* recv, const std::vector<size_t>& counts,
                            DType dtype, const CallOptions& call = {}) = 0;
  // send holds world_size * count elements; rank r receives the reduction of slice r.
  virtual Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                               const CallOptions& call = {}) = 0;
  // send holds sum(counts) elements; rank r receives the reduction of its counts[r] elements
  // (after those of ranks 0..r-1). Shards become uneven when a job shrinks.
  virtual Status ReduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType dtype, ReduceOp op, const CallOptions& call = {}) = 0;
  // Point to point. A send may wait until `peer` makes the matching receive (as MPI's
  // synchronous send; with Gloo, a pair connected at its first call always does: docs/comm.md,
  // "Which pairs connect"), so ranks that exchange in a cycle must not all send first.
  virtual Status Send(const void* buffer, size_t count, DType dtype, int peer,
                      const CallOptions& call = {}) = 0;
  virtual Status Recv(void* buffer, size_t count, DType dtype, int peer,
                      const CallOptions& call = {}) = 0;
  virtual Status Barrier(const CallOptions& call = {}) = 0;
  // NCCL: waits until every call enqueued on `stream` has completed (OK), the communicator failed
  // or was aborted (kAborted) or `timeout` passed (kDeadlineExceeded; 0: the default). Gloo's
  // calls complete before they return: Wait only reports whether the communicator is usable.
  virtual Status Wait(void* stream = nullptr,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) = 0;

  // Local: never waits for a peer, idempotent, safe from any thread at any time. A call in
  // flight returns kAborted within milliseconds; every later call returns kAborted. Slow
  // backend work (ncclCommAbort) runs on a thread of its own.
  virtual void Abort() = 0;
  virtual bool aborted() const = 0;
};

}  // namespace rtft
