// KvGather (gather.h): through the coordinator when the runtime can reach it, else over the
// key-value store (KvStoreGather), where the leader reads N keys and every other member one.
#include "runtime/gather.h"

#include <thread>

namespace rtft {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Waits for `key` in slices, ending with kAborted once the job moved past `epoch`.
StatusOr<std::string> GetInEpoch(Runtime* rt, const std::string& key, uint64_t epoch,
                                 Clock::time_point deadline, milliseconds slice) {
  while (true) {
    if (rt->current().epoch > epoch)
      return Status::Aborted("gather: epoch " + std::to_string(epoch) + " ended");
    auto v = rt->KvGet(key, slice);
    if (v.ok() || v.status().code() != StatusCode::kDeadlineExceeded) return v;
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded("gather: '" + key + "' not put in time");
  }
}

std::string Prefix(const std::string& key, uint64_t epoch) {
  return key + "/e" + std::to_string(epoch) + "/";
}

}  // namespace

StatusOr<KvGatherReply> KvGather(Runtime* rt, const std::string& key, uint64_t epoch, int members,
                                 int index, const std::string& value, bool all,
                                 milliseconds timeout) {
  if (members < 1 || index < 0 || index >= members)
    return Status::InvalidArgument("gather: member " + std::to_string(index) + " of " +
                                   std::to_string(members));
  if (auto* service = dynamic_cast<GatherService*>(rt))
    return service->ServeGather(key, epoch, members, index, value, all, timeout);
  return KvStoreGather(rt, key, epoch, members, index, value, all, timeout);
}

Status KvGatherResult(Runtime* rt, const std::string& key, uint64_t epoch,
                      const std::string& value) {
  if (auto* service = dynamic_cast<GatherService*>(rt))
    return service->ServeGatherResult(key, epoch, value);
  return KvStoreGatherResult(rt, key, epoch, value);
}

StatusOr<KvGatherReply> KvStoreGather(Runtime* rt, const std::string& key, uint64_t epoch,
                                      int members, int index, const std::string& value, bool all,
                                      milliseconds timeout, milliseconds slice) {
  if (members < 1 || index < 0 || index >= members)
    return Status::InvalidArgument("gather: member " + std::to_string(index) + " of " +
                                   std::to_string(members));
  const std::string prefix = Prefix(key, epoch);
  const auto deadline = Clock::now() + timeout;
  RTFT_RETURN_IF_ERROR(rt->KvPut(prefix + "m" + std::to_string(index), value));
  KvGatherReply reply;
  if (all || index == 0) {
    reply.values.reserve(static_cast<size_t>(members));
    for (int r = 0; r < members; ++r) {
      RTFT_ASSIGN_OR_RETURN(
          std::string v, GetInEpoch(rt, prefix + "m" + std::to_string(r), epoch, deadline, slice));
      reply.values.push_back(std::move(v));
    }
    return reply;
  }
  RTFT_ASSIGN_OR_RETURN(std::string result,
                        GetInEpoch(rt, prefix + "result", epoch, deadline, slice));
  reply.result = std::move(result);
  return reply;
}

Status KvStoreGatherResult(Runtime* rt, const std::string& key, uint64_t epoch,
                           const std::string& value) {
  return rt->KvPut(Prefix(key, epoch) + "result", value);
}

}  // namespace rtft
