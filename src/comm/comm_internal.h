// What the comm backends share: the resolved options of a communicator (defaults filled from
// RTFT_COMM_*), the rendezvous key names, deadline helpers and each backend's factory. Only
// src/comm/ includes this; the backends never include each other.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rtft/comm.h"

namespace rtft::comm {

using Clock = CommClock;
using std::chrono::milliseconds;

// CommOptions with every default resolved and every field checked.
struct ResolvedOptions {
  CommOptions o;
  milliseconds create_timeout{0};
  milliseconds timeout{0};
  Clock::time_point create_deadline;
};
StatusOr<ResolvedOptions> ResolveOptions(const CommOptions& options);

// "comm/e<epoch>/<name>/<what>": every key of one communicator, so that an epoch's keys are never
// confused with another's and communicators of one epoch do not collide.
std::string CommKey(uint64_t epoch, const std::string& name, const std::string& what);

// The deadline `timeout` from now, or the default when `timeout` is 0; far futures are clamped so
// that time arithmetic never overflows.
Clock::time_point DeadlineFrom(milliseconds timeout, milliseconds default_timeout);
// Milliseconds left until `deadline` (0 when it passed), rounded up.
milliseconds Remaining(Clock::time_point deadline);

// Checks that `count` elements of `dtype` fit in size_t bytes; returns the byte count.
StatusOr<size_t> CountBytes(size_t count, DType dtype, const char* what);

// Binary values (addresses, tokens, NCCL ids) go into the store as lowercase hex.
std::string HexEncode(const void* data, size_t bytes);
// False unless `hex` is an even number of lowercase hex digits.
bool HexDecode(const std::string& hex, std::vector<char>* out);

// "allreduce", "broadcast", ...: names of the calls in error messages and frames.
enum class OpKind : uint16_t {
  kHello = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kAllGather = 4,
  kReduceScatter = 5,
  kSendRecv = 6,
  kBarrier = 7,
  kBye = 8,
};
const char* OpKindName(OpKind op);

// Factories of the backends compiled into this build (one explicit list in comm.cc).
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const ResolvedOptions& options);
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const ResolvedOptions& options);

}  // namespace rtft::comm
