// Every RTFT_* tunable, declared once: RTFT_PARAM(id, env name, type, default, description).
// Included only by params.h and params.cc; `dp-launch --print-config` and `rtft-ckpt config`
// print this table.
// clang-format off
RTFT_PARAM(kLogLevel, "RTFT_LOG_LEVEL", kString, "warn", "log level: error, warn, info, debug, trace")
RTFT_PARAM(kLogSubsys, "RTFT_LOG_SUBSYS", kString, "all", "subsystems to log: all, or a comma list of core,ckpt,io,comm,offload,ctrl,runtime,launch,tool")
RTFT_PARAM(kCkptPoolBytes, "RTFT_CKPT_POOL_BYTES", kBytes, "1G", "size of the pinned host pool that captured state waits in before it is written (K/M/G suffixes)")
RTFT_PARAM(kCkptChunkBytes, "RTFT_CKPT_CHUNK_BYTES", kBytes, "64M", "largest single capture/write unit; larger tensors are split (multiple of 4 KiB)")
RTFT_PARAM(kCkptSmallTensorBytes, "RTFT_CKPT_SMALL_TENSOR_BYTES", kBytes, "1M", "tensors below this size are coalesced into shared transfers")
RTFT_PARAM(kCkptCaptureThreads, "RTFT_CKPT_CAPTURE_THREADS", kInt, "4", "host threads that copy host-resident tensors into the pool")
RTFT_PARAM(kCkptFlushThreads, "RTFT_CKPT_FLUSH_THREADS", kInt, "4", "threads that checksum and write captured chunks")
RTFT_PARAM(kCkptIoBackend, "RTFT_CKPT_IO_BACKEND", kString, "auto", "file I/O backend: auto (io_uring if usable, else posix), uring, posix")
RTFT_PARAM(kCkptIoDepth, "RTFT_CKPT_IO_DEPTH", kInt, "16", "io_uring queue depth per flush thread")
RTFT_PARAM(kCkptDirectIo, "RTFT_CKPT_DIRECT_IO", kBool, "1", "write tensor bytes with O_DIRECT where the file system allows it")
RTFT_PARAM(kCkptKeepVersions, "RTFT_CKPT_KEEP_VERSIONS", kInt, "2", "complete versions kept on disk; older ones are deleted after a commit (0 keeps all)")
RTFT_PARAM(kCkptCommitTimeoutMs, "RTFT_CKPT_COMMIT_TIMEOUT_MS", kInt, "600000", "how long rank 0 waits for every rank's file before a version's commit fails")
RTFT_PARAM(kCkptWaitTimeoutMs, "RTFT_CKPT_WAIT_TIMEOUT_MS", kInt, "3600000", "default deadline of WaitCaptured/WaitPersisted")
// clang-format on
