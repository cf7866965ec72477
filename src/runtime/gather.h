// One gather of an epoch among its ranks (docs/control-protocol.md, "Gather"), for the
// Protector's rollback agreement (docs/protect.md, "Recovery"): each rank contributes once;
// member 0 (the leader) receives every contribution in member order and answers with
// KvGatherResult; every other member receives that result once. With `all`, every member
// receives every contribution (worlds of at most 256). kAborted as soon as the job moves past
// `epoch`; kDeadlineExceeded after `timeout`. Under dp-launch the coordinator serves it (one
// message per member each way); any other Runtime (standalone, tests) runs it over KvPut/KvGet.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rtft/runtime.h"
#include "rtft/status.h"

namespace rtft {

struct KvGatherReply {
  std::vector<std::string> values;    // the leader's (or, with `all`, everyone's)
  std::optional<std::string> result;  // the others': the leader's result
};

StatusOr<KvGatherReply> KvGather(Runtime* rt, const std::string& key, uint64_t epoch, int members,
                                 int index, const std::string& value, bool all,
                                 std::chrono::milliseconds timeout);
Status KvGatherResult(Runtime* rt, const std::string& key, uint64_t epoch,
                      const std::string& value);

// The same over the job's key-value store whatever the runtime, for a gather among some of an
// epoch's ranks (the coordinator's counts every rank of the epoch): checkpoint-and-exit's
// survivors (docs/protect.md, "Spares exhausted"). Each wait is a request the store holds for
// `slice` (a shorter one sees the epoch's end sooner, a longer one asks less often).
StatusOr<KvGatherReply> KvStoreGather(
    Runtime* rt, const std::string& key, uint64_t epoch, int members, int index,
    const std::string& value, bool all, std::chrono::milliseconds timeout,
    std::chrono::milliseconds slice = std::chrono::milliseconds(50));
Status KvStoreGatherResult(Runtime* rt, const std::string& key, uint64_t epoch,
                           const std::string& value);

// What a runtime that can reach the coordinator's gather implements (runtime.cc's agent runtime).
class GatherService {
 public:
  virtual ~GatherService() = default;
  virtual StatusOr<KvGatherReply> ServeGather(const std::string& key, uint64_t epoch, int members,
                                              int index, const std::string& value, bool all,
                                              std::chrono::milliseconds timeout) = 0;
  virtual Status ServeGatherResult(const std::string& key, uint64_t epoch,
                                   const std::string& value) = 0;
};

}  // namespace rtft
