// The step's communicators, watched for the hang detector (docs/protect.md, "Hangs"): a watched
// communicator's calls count in the process's ProgressMonitor (core/progress.h), which says
// whether a call is under way and which peer it waits on. The protector watches its epoch's
// training and grid communicators; the replication streams, whose waits are not the step's, and
// the application's own communicators are not watched.
#pragma once

#include <vector>

#include "rtft/comm.h"

namespace rtft::comm {

// `job_ranks[i]`: the job rank of `comm`'s rank i (its size: the communicator's). Gloo only: an
// NCCL call returns once enqueued and its wait is the GPU's, so an NCCL communicator is left
// unwatched (a hang inside one is seen as a rank outside any call). Before the first call.
void WatchCalls(Communicator* comm, std::vector<int> job_ranks);

}  // namespace rtft::comm
