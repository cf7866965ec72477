! rt-ft for Fortran: the C API (rtft/rtft.h, docs/capi.md) through ISO_C_BINDING. Handles are
! type(c_ptr); every function returns an integer(c_int) status, RTFT_OK (0) or minus the
! rtft::StatusCode, with rtft_error_message() the message of the last failure on this thread.
! Calls that take a name take a Fortran string (trailing blanks trimmed). Data is passed by
! address (c_loc of a TARGET array); a Fortran array a(n1, n2) is, in C order, of shape [n2, n1].
! Unsigned 64-bit counts (steps, epochs, versions) are integer(c_int64_t). Built into
! librt-ft-fortran; tests/fortran/protect_test.f90 is a protected program.
module rtft
  use, intrinsic :: iso_c_binding
  implicit none

  integer(c_int), parameter :: RTFT_OK = 0, RTFT_INVALID_ARGUMENT = -1, RTFT_NOT_FOUND = -2, &
    RTFT_ALREADY_EXISTS = -3, RTFT_FAILED_PRECONDITION = -4, RTFT_OUT_OF_RANGE = -5, &
    RTFT_RESOURCE_EXHAUSTED = -6, RTFT_PERMISSION_DENIED = -7, RTFT_DEADLINE_EXCEEDED = -8, &
    RTFT_UNAVAILABLE = -9, RTFT_ABORTED = -10, RTFT_DATA_LOSS = -11, RTFT_IO_ERROR = -12, &
    RTFT_UNIMPLEMENTED = -13, RTFT_INTERNAL = -14, RTFT_DEVICE_LOST = -15, RTFT_SHUTDOWN = -16
  integer(c_int), parameter :: RTFT_FLOAT32 = 0, RTFT_FLOAT16 = 1, RTFT_BFLOAT16 = 2, &
    RTFT_INT8 = 3, RTFT_INT32 = 4, RTFT_INT64 = 5, RTFT_UINT8 = 6, RTFT_FLOAT64 = 7
  integer(c_int), parameter :: RTFT_SUM = 0, RTFT_AVG = 1, RTFT_MAX = 2, RTFT_MIN = 3
  integer(c_int), parameter :: RTFT_BACKEND_GLOO = 0, RTFT_BACKEND_NCCL = 1
  integer(c_int), parameter :: RTFT_ROLE_INITIAL = 0, RTFT_ROLE_SPARE_ACTIVATED = 1, &
    RTFT_ROLE_RESTARTED = 2, RTFT_ROLE_STANDALONE = 3
  integer(c_int), parameter :: RTFT_RUN_DONE = 0, RTFT_RUN_SHUTDOWN = 1
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
  ! String fields (dir, io_backend, ckpt_dir, comm_name) are c_loc of a NUL-terminated TARGET
  ! string (rtft_c_string), or c_null_ptr.
  type, bind(c) :: rtft_ckpt_options
    type(c_ptr) :: dir
    integer(c_int32_t) :: rank, world_size
    integer(c_int64_t) :: pool_bytes
    integer(c_int32_t) :: keep_versions, pin_pool
    type(c_ptr) :: io_backend
  end type
  type, bind(c) :: rtft_protect_options
    integer(c_int32_t) :: enabled
    integer(c_int64_t) :: l3_every
    type(c_ptr) :: ckpt_dir, comm_name
  end type
  type, bind(c) :: rtft_step_context
    integer(c_int64_t) :: step, epoch
    integer(c_int32_t) :: rank, world_size
    type(c_ptr) :: comm
    integer(c_int32_t) :: recovered
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
    integer(c_int) function rtft_ckpt_options_init(options) bind(c)
      import :: c_int, rtft_ckpt_options
      type(rtft_ckpt_options), intent(out) :: options
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
    integer(c_int) function rtft_protect_options_init(options) bind(c)
      import :: c_int, rtft_protect_options
      type(rtft_protect_options), intent(out) :: options
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
  end interface

  ! The C functions that take names, and the two that return text, under names of their own.
  interface
    type(c_ptr) function c_last_error() bind(c, name='rtft_last_error')
      import :: c_ptr
    end function
    type(c_ptr) function c_version() bind(c, name='rtft_version')
      import :: c_ptr
    end function
    integer(c_size_t) function c_strlen(s) bind(c, name='strlen')
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
    integer(c_int) function c_add_tensor(state, name, dtype, ndim, shape, data) &
        bind(c, name='rtft_state_add_tensor')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: state, data
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: dtype, ndim
      integer(c_int64_t), intent(in) :: shape(*)
    end function
    integer(c_int) function c_add_shard(state, name, dtype, ndim, shape, global_shape, offset, &
                                        data) bind(c, name='rtft_state_add_shard')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: state, data
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: dtype, ndim
      integer(c_int64_t), intent(in) :: shape(*), global_shape(*), offset(*)
    end function
    integer(c_int) function c_add_object(state, name, save, load, user) &
        bind(c, name='rtft_state_add_object')
      import :: c_int, c_ptr, c_char, c_funptr
      type(c_ptr), value :: state, user
      character(kind=c_char), intent(in) :: name(*)
      type(c_funptr), value :: save, load
    end function
    integer(c_int) function c_ckpt_latest(dir, version) bind(c, name='rtft_ckpt_latest')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: dir(*)
      integer(c_int64_t), intent(out) :: version
    end function
    integer(c_int) function c_ckpt_restore(dir, version, state) bind(c, name='rtft_ckpt_restore')
      import :: c_int, c_ptr, c_char, c_int64_t
      character(kind=c_char), intent(in) :: dir(*)
      integer(c_int64_t), value :: version
      type(c_ptr), value :: state
    end function
    integer(c_int) function c_comm_create(runtime, name, backend, comm) &
        bind(c, name='rtft_comm_create')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: backend
      type(c_ptr), intent(out) :: comm
    end function
    integer(c_int) function c_fault_point(name) bind(c, name='rtft_fault_point')
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: name(*)
    end function
  end interface

contains

  ! A NUL-terminated copy of `s` without its trailing blanks.
  function rtft_c_string(s) result(c)
    character(*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c
    c = trim(s)//c_null_char
  end function

  function to_fortran(p) result(s)
    type(c_ptr), intent(in) :: p
    character(:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  ! The message of the last call on this thread that failed ("CODE: message").
  function rtft_error_message() result(s)
    character(:), allocatable :: s
    s = to_fortran(c_last_error())
  end function

  function rtft_version() result(s)
    character(:), allocatable :: s
    s = to_fortran(c_version())
  end function

  integer(c_int) function rtft_state_add_tensor(state, name, dtype, shape, data)
    type(c_ptr), value :: state, data
    character(*), intent(in) :: name
    integer(c_int), value :: dtype
    integer(c_int64_t), intent(in) :: shape(:)
    rtft_state_add_tensor = c_add_tensor(state, rtft_c_string(name), dtype, size(shape), &
                                         shape, data)
  end function

  integer(c_int) function rtft_state_add_shard(state, name, dtype, shape, global_shape, offset, &
                                               data)
    type(c_ptr), value :: state, data
    character(*), intent(in) :: name
    integer(c_int), value :: dtype
    integer(c_int64_t), intent(in) :: shape(:), global_shape(:), offset(:)
    if (size(global_shape) /= size(shape) .or. size(offset) /= size(shape)) then
      rtft_state_add_shard = RTFT_INVALID_ARGUMENT
      return
    end if
    rtft_state_add_shard = c_add_shard(state, rtft_c_string(name), dtype, size(shape), shape, &
                                       global_shape, offset, data)
  end function

  ! save, load: c_funloc of bind(c) functions: save(user, bytes) calls rtft_bytes_set;
  ! load(user, data, size) by value.
  integer(c_int) function rtft_state_add_object(state, name, save, load, user)
    type(c_ptr), value :: state, user
    character(*), intent(in) :: name
    type(c_funptr), value :: save, load
    rtft_state_add_object = c_add_object(state, rtft_c_string(name), save, load, user)
  end function

  integer(c_int) function rtft_ckpt_latest(dir, version)
    character(*), intent(in) :: dir
    integer(c_int64_t), intent(out) :: version
    rtft_ckpt_latest = c_ckpt_latest(rtft_c_string(dir), version)
  end function

  integer(c_int) function rtft_ckpt_restore(dir, version, state)
    character(*), intent(in) :: dir
    integer(c_int64_t), value :: version
    type(c_ptr), value :: state
    rtft_ckpt_restore = c_ckpt_restore(rtft_c_string(dir), version, state)
  end function

  integer(c_int) function rtft_comm_create(runtime, name, backend, comm)
    type(c_ptr), value :: runtime
    character(*), intent(in) :: name
    integer(c_int), value :: backend
    type(c_ptr), intent(out) :: comm
    rtft_comm_create = c_comm_create(runtime, rtft_c_string(name), backend, comm)
  end function

  integer(c_int) function rtft_fault_point(name)
    character(*), intent(in) :: name
    rtft_fault_point = c_fault_point(rtft_c_string(name))
  end function

end module rtft
