#include "protect/l3_writer.h"

#include <algorithm>
#include <memory>

#include "checkpoint/commit/commit.h"
#include "checkpoint/io/io_backend.h"
#include "checkpoint/layout/layout.h"
#include "checkpoint/layout/manifest.h"
#include "checkpoint/layout/naming.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/progress.h"

namespace rtft::protect {

L3Writer::L3Writer(std::string dir, uint64_t every, std::chrono::milliseconds commit_timeout)
    : dir_(std::move(dir)), every_(every), commit_timeout_(commit_timeout) {}

// At the end of a run every rank's last version is still being committed: the engine is
// destroyed here, which waits for it (never abandoned, unlike a retirement at an epoch's end).
L3Writer::~L3Writer() {
  (void)Ready();
  retirement_.Join();
  engine_.reset();
}

void L3Writer::Withdraw(uint64_t after_step, uint64_t epoch, const std::string& why) {
  if (!enabled()) return;
  WithdrawNow(after_step, epoch, why);
  // Again once the retired engines are destroyed (their commits ended): on the thread that
  // destroys them, after them.
  auto retired = std::make_shared<Thread>(std::move(retirement_));
  auto thread = Thread::Start("rtft-l3-withdraw", [this, retired, after_step, epoch, why] {
    retired->Join();
    WithdrawNow(after_step, epoch, why);
  });
  if (thread.ok()) {
    retirement_ = std::move(*thread);
  } else {
    retired->Join();
    WithdrawNow(after_step, epoch, why);
  }
}

void L3Writer::WithdrawNow(uint64_t after_step, std::optional<uint64_t> own_write,
                           const std::string& why) const {
  const auto versions = ListVersions(dir_);
  auto io = CreateIoBackend({"posix", 1});
  if (!versions.ok() || !io.ok()) {
    RTFT_LOG(kError, kLogRuntime) << "L3: cannot withdraw versions: "
                                  << (versions.ok() ? io.status() : versions.status());
    return;
  }
  std::optional<uint64_t> newest;  // the newest complete version left
  std::string withdrawn;
  for (const VersionInfo& v : *versions) {
    if (!v.complete) continue;
    if (v.version <= after_step) {
      newest = v.version;
      continue;
    }
    // One this epoch wrote (its rank 0 file carries the epoch as its write id) stays.
    if (own_write) {
      const StatusOr<FileManifest> m = ReadFileManifest(RankFilePath(dir_, v.version, 0));
      if (m.ok() && m->write_id == *own_write) {
        newest = v.version;
        continue;
      }
    }
    const Status removed = (*io)->Remove(GlobalManifestPath(dir_, v.version));
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {  // absent: withdrawn already
      RTFT_LOG(kError, kLogRuntime)
          << "L3: cannot withdraw version " << v.version << ": " << removed;
      newest = v.version;
    } else {
      withdrawn += (withdrawn.empty() ? "" : ", ") + std::to_string(v.version);
    }
  }
  // LATEST where it names no complete version (one just withdrawn, or one whose commit wrote
  // LATEST after the first pass withdrew it).
  const bool stale = LatestVersion(dir_).status().code() == StatusCode::kDataLoss;
  if (withdrawn.empty() && !stale) return;
  Status moved = Status::Ok();
  if (stale) {
    moved = newest
                ? WriteFileAtomically(io->get(), LatestPath(dir_), std::to_string(*newest) + "\n")
                : (*io)->Remove(LatestPath(dir_));
    if (!moved.ok()) RTFT_LOG(kError, kLogRuntime) << "L3: cannot move LATEST back: " << moved;
  }
  RTFT_LOG(kWarn, kLogRuntime) << "L3: versions after step " << after_step << " withdrawn ("
                               << (withdrawn.empty() ? "none complete" : withdrawn) << "): " << why
                               << (!stale || !moved.ok() ? std::string()
                                   : newest ? "; LATEST names version " + std::to_string(*newest)
                                            : std::string("; LATEST removed"));
}

CheckpointOptions L3Writer::Options(int rank, int world, uint64_t state_bytes,
                                    uint64_t epoch) const {
  CheckpointOptions c;
  c.dir = dir_;
  c.rank = rank;
  c.world_size = world;
  // Every rank of an epoch writes its versions as one write: a version the job writes again after
  // it went back (a recovery, a replay's rollback) never commits a file an earlier epoch left.
  c.write_id = epoch;
  // A commit waiting for a rank that died is abandoned with its engine at the next recovery; it
  // then gives up after this long in the background.
  c.commit_timeout = commit_timeout_;
  // The protected state is in host memory: no CUDA context for it. A process with one takes tens
  // of milliseconds longer to die, which is time before its crash is seen.
  c.pin_pool = false;
  // Sized by the snapshot, not by the node, unless the user chose: one step's state fits, and the
  // pool is allocated when the engine is created, so recovery does not wait for a large one.
  if (!ParamIsSet(Param::kCkptPoolBytes)) {
    const uint64_t mib = 1ull << 20;
    const uint64_t chunk =
        std::clamp<uint64_t>((state_bytes / 4 + mib - 1) / mib * mib, mib, 64 * mib);
    c.chunk_bytes = chunk;
    c.flush_threads = 2;
    c.pool_bytes = std::max<uint64_t>(4 * chunk, (state_bytes + mib - 1) / mib * mib);
  }
  return c;
}

Status L3Writer::Open(int rank, int world, uint64_t state_bytes, uint64_t epoch, When when) {
  if (!enabled()) return Status::Ok();
  Retire();
  const CheckpointOptions options = Options(rank, world, state_bytes, epoch);
  if (when == When::kInBackground) {
    auto thread = Thread::Start("rtft-l3-open", [this, options] {
      auto engine = CheckpointEngine::Create(options);
      if (engine.ok()) {
        opened_ = std::move(*engine);
      } else {
        open_status_ = engine.status();
      }
    });
    if (thread.ok()) {
      opener_ = std::move(*thread);
      return Status::Ok();
    }
    // No thread to give: opened here.
  }
  RTFT_ASSIGN_OR_RETURN(engine_, CheckpointEngine::Create(options));
  return Status::Ok();
}

Status L3Writer::Ready() {
  if (!opener_.running()) return Status::Ok();
  {
    const LongPhase long_phase;  // the engine's pool may still be being pinned
    opener_.Join();
  }
  Status s = opener_.status().ok() ? open_status_ : opener_.status();
  open_status_ = Status::Ok();
  if (s.ok()) {
    engine_ = std::move(opened_);
    return s;
  }
  s = s.Annotate("opening the L3 engine");
  RTFT_LOG(kError, kLogRuntime) << s;
  return s;
}

void L3Writer::Retire() {
  (void)Ready();
  if (!engine_) {
    // A withdrawal's second pass ends before another engine writes, whose versions it must not
    // take for an earlier epoch's.
    retirement_.Join();
    return;
  }
  // Its copy out of L1 is local and short: let it finish before the areas change again.
  (void)WaitCopied();
  // A commit waiting for a lost rank's file ends now, not at its timeout.
  engine_->Abandon();
  retirement_.Join();
  auto thread = Thread::Start(
      "rtft-l3-retire", [engine = std::shared_ptr<CheckpointEngine>(std::move(engine_))]() mutable {
        engine.reset();
      });
  // Without a thread the engine is destroyed here, which waits for its files.
  if (thread.ok()) retirement_ = std::move(*thread);
}

Status L3Writer::Write(uint64_t step, const StateProvider& view, const VersionMarks& marks) {
  // An engine that could not be opened writes nothing; its error was logged.
  if (const Status ready = Ready(); !ready.ok()) return Status::Ok();
  if (!engine_) return Status::Ok();
  const LongPhase long_phase;  // the wait for the last version's copy, and this one's start
  RTFT_RETURN_IF_ERROR(WaitCopied());
  const Status s = engine_->Checkpoint(step, view, marks);
  if (!s.ok()) {
    RTFT_LOG(kError, kLogRuntime) << "L3 checkpoint of step " << step << ": " << s;
    return s.code() == StatusCode::kAborted ? s : Status::Ok();
  }
  pending_ = step;
  RTFT_LOG(kInfo, kLogRuntime) << "L3: step " << step << " is being written to " << dir_;
  return Status::Ok();
}

void L3Writer::BeforeCapture(uint64_t step) {
  // Nothing is pending on an engine still being opened.
  if (!engine_ || !pending_ || *pending_ + 2 != step) return;
  const LongPhase long_phase;
  const Status s = engine_->WaitCaptured(*pending_);
  if (!s.ok()) RTFT_LOG(kError, kLogRuntime) << "L3 checkpoint of step " << *pending_ << ": " << s;
  pending_.reset();
}

Status L3Writer::WaitCopied() {
  if (!engine_ || !pending_) return Status::Ok();
  const Status s = engine_->WaitCaptured(*pending_);
  pending_.reset();
  return s;
}

Status L3Writer::WaitPersisted(uint64_t step) {
  RTFT_RETURN_IF_ERROR(Ready());
  if (!engine_) return Status::FailedPrecondition("no L3 engine is open");
  return engine_->WaitPersisted(step);
}

}  // namespace rtft::protect
