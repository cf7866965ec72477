! rt-ft for Fortran, the lower half: the C API's constants, its structs as bind(c) types, and the
! interfaces of every C function that takes no name (rtft.h, docs/capi.md). Use module rtft
! (rtft.f90), which adds the calls that take names and return text.
module rtft_c
  use, intrinsic :: iso_c_binding
  implicit none

  ! BEGIN generated: the enumerations (scripts/gen-enums.sh)
  ! rtft_status_t
  integer(c_int), parameter :: RTFT_OK = 0
  integer(c_int), parameter :: RTFT_INVALID_ARGUMENT = -1
  integer(c_int), parameter :: RTFT_NOT_FOUND = -2
  integer(c_int), parameter :: RTFT_ALREADY_EXISTS = -3
  integer(c_int), parameter :: RTFT_FAILED_PRECONDITION = -4
  integer(c_int), parameter :: RTFT_OUT_OF_RANGE = -5
  integer(c_int), parameter :: RTFT_RESOURCE_EXHAUSTED = -6
  integer(c_int), parameter :: RTFT_PERMISSION_DENIED = -7
  integer(c_int), parameter :: RTFT_DEADLINE_EXCEEDED = -8
  integer(c_int), parameter :: RTFT_UNAVAILABLE = -9
  integer(c_int), parameter :: RTFT_ABORTED = -10
  integer(c_int), parameter :: RTFT_DATA_LOSS = -11
  integer(c_int), parameter :: RTFT_IO_ERROR = -12
  integer(c_int), parameter :: RTFT_UNIMPLEMENTED = -13
  integer(c_int), parameter :: RTFT_INTERNAL = -14
  integer(c_int), parameter :: RTFT_DEVICE_LOST = -15
  integer(c_int), parameter :: RTFT_SHUTDOWN = -16
  ! rtft_dtype_t
  integer(c_int), parameter :: RTFT_FLOAT32 = 0
  integer(c_int), parameter :: RTFT_FLOAT16 = 1
  integer(c_int), parameter :: RTFT_BFLOAT16 = 2
  integer(c_int), parameter :: RTFT_INT8 = 3
  integer(c_int), parameter :: RTFT_INT32 = 4
  integer(c_int), parameter :: RTFT_INT64 = 5
  integer(c_int), parameter :: RTFT_UINT8 = 6
  integer(c_int), parameter :: RTFT_FLOAT64 = 7
  ! rtft_reduce_op_t
  integer(c_int), parameter :: RTFT_SUM = 0
  integer(c_int), parameter :: RTFT_AVG = 1
  integer(c_int), parameter :: RTFT_MAX = 2
  integer(c_int), parameter :: RTFT_MIN = 3
  ! rtft_backend_t
  integer(c_int), parameter :: RTFT_BACKEND_GLOO = 0
  integer(c_int), parameter :: RTFT_BACKEND_NCCL = 1
  ! rtft_role_t
  integer(c_int), parameter :: RTFT_ROLE_INITIAL = 0
  integer(c_int), parameter :: RTFT_ROLE_SPARE_ACTIVATED = 1
  integer(c_int), parameter :: RTFT_ROLE_RESTARTED = 2
  integer(c_int), parameter :: RTFT_ROLE_STANDALONE = 3
  ! rtft_run_outcome_t
  integer(c_int), parameter :: RTFT_RUN_DONE = 0
  integer(c_int), parameter :: RTFT_RUN_SHUTDOWN = 1
  ! END generated
  ! RTFT_CKPT_LATEST of rtft.h (UINT64_MAX); Fortran names ignore case, and rtft_ckpt_latest is
  ! a function.
  integer(c_int64_t), parameter :: RTFT_LATEST_VERSION = -1_c_int64_t
  integer, parameter :: RTFT_EVENT_MAX_FAILED = 16

  type, bind(c) :: rtft_event
    integer(c_int64_t) :: epoch
    integer(c_int32_t) :: rank, world_size, shutdown, checkpoint_first, failed_count
    integer(c_int32_t) :: failed_ranks(RTFT_EVENT_MAX_FAILED)
    character(kind=c_char) :: reason(256)
  end type
  ! The options structs, field for field as rtft.h's (the capi_option_fields test compares them).
  ! Initialise them with rtft_ckpt_options_init / rtft_protect_options_init of module rtft, which
  ! set `size` to c_sizeof of the type. String fields (dir, io_backend, ckpt_dir, comm_name,
  ! shm_dir) are c_loc of a NUL-terminated TARGET string (rtft_c_string), or c_null_ptr.
  type, bind(c) :: rtft_ckpt_options
    integer(c_size_t) :: size
    type(c_ptr) :: dir
    integer(c_int32_t) :: rank, world_size
    integer(c_int64_t) :: pool_bytes
    integer(c_int32_t) :: keep_versions, pin_pool
    type(c_ptr) :: io_backend
    integer(c_int64_t) :: chunk_bytes
    integer(c_int32_t) :: capture_threads, flush_threads, io_depth, direct_io
    integer(c_int64_t) :: commit_timeout_ms, wait_timeout_ms
    integer(c_int64_t) :: write_id
  end type
  ! grid_ranks: c_loc of a TARGET integer(c_int32_t) array. protect_step: c_funloc of a bind(c)
  ! function returning integer(c_int) (nonzero: the step takes a snapshot), with arguments
  ! (user, step) by value: type(c_ptr) and integer(c_int64_t).
  type, bind(c) :: rtft_protect_options
    integer(c_size_t) :: size
    integer(c_int32_t) :: enabled
    integer(c_int64_t) :: l3_every
    type(c_ptr) :: ckpt_dir, comm_name
    integer(c_int32_t) :: backend, device
    type(c_ptr) :: stream, shm_dir
    integer(c_int64_t) :: max_object_bytes, recovery_timeout_ms
    integer(c_int32_t) :: grid_tensor, grid_pipeline
    type(c_ptr) :: grid_ranks
    integer(c_size_t) :: grid_rank_count
    type(c_funptr) :: protect_step
    type(c_ptr) :: protect_step_user
    integer(c_int32_t) :: replay_every, check_finite
  end type
  type, bind(c) :: rtft_step_context
    integer(c_int64_t) :: step, epoch
    integer(c_int32_t) :: rank, world_size
    type(c_ptr) :: comm
    integer(c_int32_t) :: recovered, device
    type(c_ptr) :: stream
    integer(c_int32_t) :: data_rank, replaying
  end type
  type, bind(c) :: rtft_run_result
    integer(c_int32_t) :: outcome, checkpointed
    integer(c_int64_t) :: next_step
  end type

  ! Calls without a name argument: the C functions themselves.
  interface
    integer(c_int) function rtft_runtime_create(runtime) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), intent(out) :: runtime
    end function
    integer(c_int) function rtft_runtime_destroy(runtime) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
    end function
    integer(c_int) function rtft_runtime_rank(runtime, rank) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
      integer(c_int), intent(out) :: rank
    end function
    integer(c_int) function rtft_runtime_world_size(runtime, world_size) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
      integer(c_int), intent(out) :: world_size
    end function
    integer(c_int) function rtft_runtime_epoch(runtime, epoch) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: runtime
      integer(c_int64_t), intent(out) :: epoch
    end function
    integer(c_int) function rtft_runtime_role(runtime, role) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
      integer(c_int), intent(out) :: role
    end function
    integer(c_int) function rtft_runtime_poll_event(runtime, event, has_event) bind(c)
      import :: c_int, c_ptr, rtft_event
      type(c_ptr), value :: runtime
      type(rtft_event), intent(out) :: event
      integer(c_int), intent(out) :: has_event
    end function
    integer(c_int) function rtft_runtime_report_step(runtime, step) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: runtime
      integer(c_int64_t), value :: step
    end function
    integer(c_int) function rtft_bytes_set(bytes, data, size) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: bytes, data
      integer(c_size_t), value :: size
    end function
    integer(c_int) function rtft_state_create(state) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), intent(out) :: state
    end function
    integer(c_int) function rtft_state_destroy(state) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: state
    end function
    integer(c_int) function rtft_state_on_restored(state, restored, user) bind(c)
      import :: c_int, c_ptr, c_funptr
      type(c_ptr), value :: state, user
      type(c_funptr), value :: restored
    end function
    integer(c_int) function rtft_even_split(n, parts, index, offset, count) bind(c)
      import :: c_int, c_int64_t
      integer(c_int64_t), value :: n
      integer(c_int), value :: parts, index
      integer(c_int64_t), intent(out) :: offset, count
    end function
    integer(c_int) function rtft_ckpt_options_init_size(options, size) bind(c)
      import :: c_int, c_size_t, rtft_ckpt_options
      type(rtft_ckpt_options), intent(out) :: options
      integer(c_size_t), value :: size
    end function
    integer(c_int) function rtft_ckpt_create(options, ckpt) bind(c)
      import :: c_int, c_ptr, rtft_ckpt_options
      type(rtft_ckpt_options), intent(in) :: options
      type(c_ptr), intent(out) :: ckpt
    end function
    integer(c_int) function rtft_ckpt_destroy(ckpt) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: ckpt
    end function
    integer(c_int) function rtft_ckpt_checkpoint(ckpt, version, state) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: ckpt, state
      integer(c_int64_t), value :: version
    end function
    integer(c_int) function rtft_ckpt_wait_captured(ckpt, version) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: ckpt
      integer(c_int64_t), value :: version
    end function
    integer(c_int) function rtft_ckpt_wait_persisted(ckpt, version) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: ckpt
      integer(c_int64_t), value :: version
    end function
    integer(c_int) function rtft_comm_destroy(comm) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
    end function
    integer(c_int) function rtft_comm_rank(comm, rank) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: rank
    end function
    integer(c_int) function rtft_comm_world_size(comm, world_size) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: world_size
    end function
    integer(c_int) function rtft_comm_epoch(comm, epoch) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: comm
      integer(c_int64_t), intent(out) :: epoch
    end function
    integer(c_int) function rtft_comm_all_reduce(comm, send, recv, count, dtype, op) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, op
    end function
    integer(c_int) function rtft_comm_broadcast(comm, buffer, count, dtype, root) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, buffer
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, root
    end function
    integer(c_int) function rtft_comm_all_gather(comm, send, recv, count, dtype) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype
    end function
    integer(c_int) function rtft_step_nonfinite(context) bind(c)
      import :: c_int, rtft_step_context
      type(rtft_step_context), intent(in) :: context
    end function
    integer(c_int) function rtft_comm_all_gather_v(comm, send, recv, counts, dtype) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, send, recv
      integer(c_size_t), intent(in) :: counts(*)
      integer(c_int), value :: dtype
    end function
    integer(c_int) function rtft_comm_reduce_scatter(comm, send, recv, count, dtype, op) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, op
    end function
    integer(c_int) function rtft_comm_send(comm, buffer, count, dtype, peer) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, buffer
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, peer
    end function
    integer(c_int) function rtft_comm_recv(comm, buffer, count, dtype, peer) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: comm, buffer
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, peer
    end function
    integer(c_int) function rtft_comm_barrier(comm) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
    end function
    integer(c_int) function rtft_comm_abort(comm) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
    end function
    integer(c_int) function rtft_protect_options_init_size(options, size) bind(c)
      import :: c_int, c_size_t, rtft_protect_options
      type(rtft_protect_options), intent(out) :: options
      integer(c_size_t), value :: size
    end function
    ! options: c_loc of an rtft_protect_options, or c_null_ptr for the defaults.
    integer(c_int) function rtft_protector_create(runtime, options, protector) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime, options
      type(c_ptr), intent(out) :: protector
    end function
    integer(c_int) function rtft_protector_destroy(protector) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: protector
    end function
    ! resize: c_funloc of a bind(c) function (user, rank, world_size, state) by value, or
    ! c_null_funptr.
    integer(c_int) function rtft_protector_protect(protector, state, resize, user) bind(c)
      import :: c_int, c_ptr, c_funptr
      type(c_ptr), value :: protector, state, user
      type(c_funptr), value :: resize
    end function
    integer(c_int) function rtft_protector_start(protector, step) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: protector
      integer(c_int64_t), intent(out) :: step
    end function
    integer(c_int) function rtft_protector_begin_step(protector, step) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: protector
      integer(c_int64_t), value :: step
    end function
    integer(c_int) function rtft_protector_before_update(protector) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: protector
    end function
    integer(c_int) function rtft_protector_end_step(protector) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: protector
    end function
    integer(c_int) function rtft_protector_recover(protector, step) bind(c)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: protector
      integer(c_int64_t), intent(out) :: step
    end function
    integer(c_int) function rtft_protector_comm(protector, comm) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: protector
      type(c_ptr), intent(out) :: comm
    end function
    integer(c_int) function rtft_protector_pause(protector, paused) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: protector
      integer(c_int), value :: paused
    end function
    integer(c_int) function rtft_protector_checkpoint_now(protector) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: protector
    end function
    ! compute, update: c_funloc of bind(c) functions (user by value, context by reference).
    integer(c_int) function rtft_protector_run(protector, end_step, compute, update, user, &
                                               result) bind(c)
      import :: c_int, c_ptr, c_funptr, c_int64_t, rtft_run_result
      type(c_ptr), value :: protector, user
      integer(c_int64_t), value :: end_step
      type(c_funptr), value :: compute, update
      type(rtft_run_result), intent(out) :: result
    end function
    ! local, reduce, update: as compute and update (the replay of steps: rtft.h).
    integer(c_int) function rtft_protector_run_split(protector, end_step, local, reduce, update, &
                                                     user, result) bind(c)
      import :: c_int, c_ptr, c_funptr, c_int64_t, rtft_run_result
      type(c_ptr), value :: protector, user
      integer(c_int64_t), value :: end_step
      type(c_funptr), value :: local, reduce, update
      type(rtft_run_result), intent(out) :: result
    end function
    ! Inside local: context is its argument; data is c_loc of the gradients' TARGET array.
    integer(c_int) function rtft_step_gradients(context, data, count, dtype) bind(c)
      import :: c_int, c_ptr, c_size_t, rtft_step_context
      type(rtft_step_context), intent(in) :: context
      type(c_ptr), value :: data
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype
    end function
  end interface

end module rtft_c
