// The enumerations that every surface of rt-ft states (C++, C, Fortran, Python), each declared
// once. Include it with one of the macros below defined and it expands that list only (as
// src/core/param_list.h does for the settings): the C++ enums of status.h, state.h, comm.h,
// runtime.h and protect.h are made here; the C constants of rtft.h, the Fortran parameters of
// rtft_c.f90 and the status table of docs/capi.md are generated from it by scripts/gen-enums.sh,
// whose --check fails a test (capi_enum_copies) when a copy differs. Values never change (they
// travel in frames and files, and are the C ABI); new entries go at the end of their list.
//
// Keep each entry on one line: the generator reads the lines.
//
//   RTFT_STATUS_CODE(id, NAME, value, "what the caller does")  StatusCode; C RTFT_NAME = -value
//   RTFT_DTYPE(id, NAME, value, bytes, "name")                 DType; C RTFT_NAME
//   RTFT_REDUCE_OP(id, NAME, value, "name")                    ReduceOp; C RTFT_NAME
//   RTFT_COMM_BACKEND(id, NAME, value, "name")                 CommBackend; C RTFT_BACKEND_NAME
//   RTFT_RUNTIME_ROLE(id, NAME, value, "meaning")              RuntimeRole; C RTFT_ROLE_NAME
//   RTFT_RUN_OUTCOME(id, NAME, value, "meaning")               RunOutcome; C RTFT_RUN_NAME
//
// No include guard: it is meant to be included once per list expanded.
// clang-format off
#ifdef RTFT_STATUS_CODE
// How far to roll back: retry (kUnavailable), rebuild communicators (kAborted), restore state
// (kDataLoss), give up the GPU and the slot (kDeviceLost), exit 0 (kShutdown).
RTFT_STATUS_CODE(kOk, OK, 0, "success")
RTFT_STATUS_CODE(kInvalidArgument, INVALID_ARGUMENT, 1, "bad input from the caller: fix the call")
RTFT_STATUS_CODE(kNotFound, NOT_FOUND, 2, "a file, version, tensor or key does not exist")
RTFT_STATUS_CODE(kAlreadyExists, ALREADY_EXISTS, 3, "refusing to overwrite")
RTFT_STATUS_CODE(kFailedPrecondition, FAILED_PRECONDITION, 4, "the system is not in a state for this call (a call out of order)")
RTFT_STATUS_CODE(kOutOfRange, OUT_OF_RANGE, 5, "an index or region outside the valid bounds")
RTFT_STATUS_CODE(kResourceExhausted, RESOURCE_EXHAUSTED, 6, "disk full, memory pool exhausted, quota")
RTFT_STATUS_CODE(kPermissionDenied, PERMISSION_DENIED, 7, "read-only file system, access refused")
RTFT_STATUS_CODE(kDeadlineExceeded, DEADLINE_EXCEEDED, 8, "a blocking call ran past its timeout")
RTFT_STATUS_CODE(kUnavailable, UNAVAILABLE, 9, "transient: retry may succeed")
RTFT_STATUS_CODE(kAborted, ABORTED, 10, "a peer failed: rebuild communicators (recover), then retry")
RTFT_STATUS_CODE(kDataLoss, DATA_LOSS, 11, "corrupt or missing data: restore state from elsewhere")
RTFT_STATUS_CODE(kIoError, IO_ERROR, 12, "an operating-system I/O error not covered above")
RTFT_STATUS_CODE(kUnimplemented, UNIMPLEMENTED, 13, "not supported by this build or backend")
RTFT_STATUS_CODE(kInternal, INTERNAL, 14, "a bug in rt-ft")
// The GPU is unusable for the rest of this process (a sticky CUDA error: illegal address, kernel
// fault, uncorrectable ECC, a device that fell off the bus). Nothing on this device can be
// retried: the application calls Runtime::ReportDeviceError() (or lets the step API do it), which
// retires the slot and lets a spare take its rank, and then exits.
RTFT_STATUS_CODE(kDeviceLost, DEVICE_LOST, 15, "the GPU is unusable for the rest of this process: exit, a spare takes the rank")
// Not a failure of this process: the job is ending (no spare was left under
// `--on-spares-exhausted checkpoint-and-exit`, or dp-launch was told to stop). Recover() returns
// it once the checkpoint the job asked for is written; the application exits 0. Protector::Run()
// returns it as RunOutcome::kShutdown instead.
RTFT_STATUS_CODE(kShutdown, SHUTDOWN, 16, "the job is ending (not a failure): exit 0")
#endif

#ifdef RTFT_DTYPE
// The values travel in communicator frames, snapshot hashes and checkpoint files.
RTFT_DTYPE(kFloat32, FLOAT32, 0, 4, "float32")
RTFT_DTYPE(kFloat16, FLOAT16, 1, 2, "float16")
RTFT_DTYPE(kBFloat16, BFLOAT16, 2, 2, "bfloat16")
RTFT_DTYPE(kInt8, INT8, 3, 1, "int8")
RTFT_DTYPE(kInt32, INT32, 4, 4, "int32")
RTFT_DTYPE(kInt64, INT64, 5, 8, "int64")
RTFT_DTYPE(kUInt8, UINT8, 6, 1, "uint8")
RTFT_DTYPE(kFloat64, FLOAT64, 7, 8, "float64")
#endif

#ifdef RTFT_REDUCE_OP
RTFT_REDUCE_OP(kSum, SUM, 0, "sum")
RTFT_REDUCE_OP(kAvg, AVG, 1, "avg")
RTFT_REDUCE_OP(kMax, MAX, 2, "max")
RTFT_REDUCE_OP(kMin, MIN, 3, "min")
#endif

#ifdef RTFT_COMM_BACKEND
RTFT_COMM_BACKEND(kGloo, GLOO, 0, "gloo")
RTFT_COMM_BACKEND(kNccl, NCCL, 1, "nccl")
#endif

#ifdef RTFT_RUNTIME_ROLE
RTFT_RUNTIME_ROLE(kInitial, INITIAL, 0, "started with its logical rank")
RTFT_RUNTIME_ROLE(kSpareActivated, SPARE_ACTIVATED, 1, "a warm spare that took over a failed slot's logical rank")
RTFT_RUNTIME_ROLE(kRestarted, RESTARTED, 2, "restarted on the same slot after a transient failure")
RTFT_RUNTIME_ROLE(kStandalone, STANDALONE, 3, "not started by dp-launch: rank 0 of 1, no failure handling")
#endif

#ifdef RTFT_RUN_OUTCOME
RTFT_RUN_OUTCOME(kDone, DONE, 0, "every step up to the end ran")
RTFT_RUN_OUTCOME(kShutdown, SHUTDOWN, 1, "the job is ending (no spare was left, or dp-launch was told to stop): exit 0")
#endif
// clang-format on
