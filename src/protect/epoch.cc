// One epoch's communicators (docs/protect.md, "Recovery", step 4), made at the start, by every
// recovery and shrink, and by the L3 fallback; dropped as a whole.
#include <algorithm>
#include <cstdint>
#include <functional>

#include "comm/watch.h"
#include "core/logging.h"
#include "core/thread.h"
#include "protect/parts.h"
#include "runtime/pause.h"

namespace rtft::protect {

// The communicators of `epoch`: the training one over every rank, one per group of the grid
// (tensor, pipeline, data parallel) when the grid has more than one dimension, and the
// replication one over this rank's data-parallel group. Every group's name carries its
// coordinates, so that the groups of one epoch meet apart. They are made at once, each on a
// thread of its own (each meets its peers through the store and connects its pairs: about 30 ms
// each, one after the other, of a crash's recovery on two cores).
Status Epoch::Build(const Parts& parts, uint64_t epoch) {
  Drop();
  Runtime* rt = parts.rt;
  const ProtectOptions& o = parts.settings->options;
  const RuntimeInfo now = rt->current();
  if (now.epoch != epoch)
    return Status::Aborted("the job moved on to epoch " + std::to_string(now.epoch));
  RTFT_ASSIGN_OR_RETURN(GridMap map, GridMap::Make(o.grid, now.world_size));
  const GridPlace me = map.of(now.rank);
  CommOptions train_options;
  train_options.backend = o.backend;
  train_options.device = parts.settings->device;
  train_options.create_timeout = parts.settings->recovery_timeout;
  struct Made {
    std::unique_ptr<Communicator> comm;
    Status status;
  };
  std::vector<std::function<StatusOr<std::unique_ptr<Communicator>>()>> makers;
  makers.push_back([&] { return rt->CreateCommunicator(o.comm_name, train_options); });
  auto group = [&](const std::string& name, int rank, int size, CommBackend backend) {
    CommOptions c = train_options;
    c.backend = backend;
    makers.push_back([rt, name = o.comm_name + name, rank, size, c] {
      return rt->CreateGroupCommunicator(name, rank, size, c);
    });
    return makers.size() - 1;
  };
  constexpr size_t kNone = SIZE_MAX;
  size_t at_tensor = kNone, at_pipeline = kNone, at_data = kNone;
  const std::string at = ".t" + std::to_string(me.t) + ".p" + std::to_string(me.p);
  if (!map.flat()) {
    const std::string d = ".d" + std::to_string(me.d);
    if (me.tensor > 1)
      at_tensor = group(".tensor.p" + std::to_string(me.p) + d, me.t, me.tensor, o.backend);
    if (me.pipeline > 1)
      at_pipeline = group(".pipeline.t" + std::to_string(me.t) + d, me.p, me.pipeline, o.backend);
    if (me.data > 1) at_data = group(".data" + at, me.d, me.data, o.backend);
  }
  std::vector<size_t> streams;
  if (me.data > 1 && o.enabled) {
    const std::string name = map.flat() ? ".replica" : ".replica" + at;
    for (int j = 0; j < parts.settings->l2_streams; ++j)
      streams.push_back(group(j == 0 ? name : name + ".s" + std::to_string(j), me.d, me.data,
                              CommBackend::kGloo));
  }
  std::vector<Made> made(makers.size());
  auto make = [&](size_t i) {
    auto c = makers[i]();
    if (c.ok()) {
      made[i].comm = std::move(*c);
    } else {
      made[i].status = c.status();
    }
  };
  std::vector<Thread> threads;
  for (size_t i = 1; i < makers.size(); ++i) {
    auto t = Thread::Start("rtft-comm-make", [&make, i] { make(i); });
    if (t.ok()) {
      threads.push_back(std::move(*t));
    } else {
      make(i);  // no thread to give: made here
    }
  }
  make(0);
  for (Thread& t : threads) t.Join();
  for (const Made& m : made) {
    RTFT_RETURN_IF_ERROR(m.status);
    if (m.comm->epoch() != epoch)
      return Status::Aborted("the job moved on to epoch " + std::to_string(m.comm->epoch()));
  }
  train = std::move(made[0].comm);
  if (train->rank() != now.rank || train->world_size() != now.world_size)
    return Status::Aborted("the job's layout changed while its communicators were made");
  grid = map;
  if (at_tensor != kNone) tensor = std::move(made[at_tensor].comm);
  if (at_pipeline != kNone) pipeline = std::move(made[at_pipeline].comm);
  if (at_data != kNone) data = std::move(made[at_data].comm);
  // The step's communicators are watched for the hang detector (comm/watch.h), each member
  // named by its job rank; the replication streams are not.
  auto watch = [](Communicator* c, int n, const std::function<int(int)>& job_rank) {
    if (c == nullptr) return;
    std::vector<int> ranks(n);
    for (int i = 0; i < n; ++i) ranks[i] = job_rank(i);
    comm::WatchCalls(c, std::move(ranks));
  };
  watch(train.get(), now.world_size, [](int r) { return r; });
  watch(tensor.get(), me.tensor, [&](int t) { return map.At(t, me.p, me.d); });
  watch(pipeline.get(), me.pipeline, [&](int p) { return map.At(me.t, p, me.d); });
  watch(data.get(), me.data, [&](int d) { return map.At(me.t, me.p, d); });
  if (!streams.empty()) {
    std::vector<std::unique_ptr<Communicator>> replication;
    for (size_t i : streams) replication.push_back(std::move(made[i].comm));
    RTFT_ASSIGN_OR_RETURN(replicator,
                          Replicator::Start(std::move(replication), parts.held->l1.get(),
                                            parts.held->l2.get(), parts.counters));
    // Tensors that change in compute (a module's buffers: BatchNorm's running statistics differ
    // per rank between two steps under DDP) cannot be compared between steps: the cross-check's
    // checksum leaves them out (docs/protect.md, "Silent data corruption").
    const auto& replicated = parts.held->layout.replicated;
    const auto changing = std::count_if(replicated.begin(), replicated.end(),
                                        [](const Entry& e) { return e.tensor.changed_in_compute; });
    Runtime* rt = parts.rt;
    replicator->set_check(parts.settings->sdc_check,
                          [rt](uint64_t step) { ReportCorruption(rt, step); });
    if (parts.settings->sdc_check && changing > 0 && me.d == 0 && me.t == 0 && me.p == 0)
      RTFT_LOG(kInfo, kLogRuntime) << "the replicated tensors' cross-check leaves out the "
                                   << changing << " that change in compute (buffers)";
  }
  return Status::Ok();
}

void Epoch::Drop() {
  replicator.reset();
  tensor.reset();
  pipeline.reset();
  data.reset();
  train.reset();
}

Status Epoch::OpenL3(const Parts& parts, L3Writer::When when) const {
  return parts.l3->Open(train->rank(), train->world_size(), parts.held->layout.payload_bytes,
                        train->epoch(), when);
}

}  // namespace rtft::protect
