! rt-ft for Fortran: the C API (rtft/rtft.h, docs/capi.md) through ISO_C_BINDING. Handles are
! type(c_ptr); every function returns an integer(c_int) status, RTFT_OK (0) or minus the
! rtft::StatusCode, with rtft_error_message() the message of the last failure on this thread.
! Calls that take a name take a Fortran string (trailing blanks trimmed). Data is passed by
! address (c_loc of a TARGET array); a Fortran array a(n1, n2) is, in C order, of shape [n2, n1].
! Unsigned 64-bit counts (steps, epochs, versions) are integer(c_int64_t). The constants, types
! and the calls without names come from module rtft_c (rtft_c.f90), which this one re-exports.
! Built into librt-ft-fortran; tests/fortran/protect_test.f90 is a protected program.
module rtft
  use, intrinsic :: iso_c_binding
  use rtft_c
  implicit none
  private :: to_fortran

  ! The C functions that take names, and the two that return text, under names of their own (use
  ! the wrappers below, which take and return Fortran strings).
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
    integer(c_int) function c_add_replicated_shard(state, name, dtype, ndim, shape, global_shape, &
                                                   offset, data) &
        bind(c, name='rtft_state_add_replicated_shard')
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
    integer(c_int) function c_fault_flag(name) bind(c, name='rtft_fault_flag')
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

  ! A shard that every rank of this rank's data-parallel group holds (HSDP's replicas): protected
  ! as replicated (rtft.h, rtft_state_add_replicated_shard).
  integer(c_int) function rtft_state_add_replicated_shard(state, name, dtype, shape, global_shape, &
                                                          offset, data)
    type(c_ptr), value :: state, data
    character(*), intent(in) :: name
    integer(c_int), value :: dtype
    integer(c_int64_t), intent(in) :: shape(:), global_shape(:), offset(:)
    if (size(global_shape) /= size(shape) .or. size(offset) /= size(shape)) then
      rtft_state_add_replicated_shard = RTFT_INVALID_ARGUMENT
      return
    end if
    rtft_state_add_replicated_shard = c_add_replicated_shard(state, rtft_c_string(name), dtype, &
                                                             size(shape), shape, global_shape, &
                                                             offset, data)
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

  ! The defaults, with options%size set (rtft.h, "Options that grow").
  integer(c_int) function rtft_ckpt_options_init(options)
    type(rtft_ckpt_options), intent(out) :: options
    rtft_ckpt_options_init = rtft_ckpt_options_init_size(options, c_sizeof(options))
  end function

  integer(c_int) function rtft_protect_options_init(options)
    type(rtft_protect_options), intent(out) :: options
    rtft_protect_options_init = rtft_protect_options_init_size(options, c_sizeof(options))
  end function

  integer(c_int) function rtft_fault_point(name)
    character(*), intent(in) :: name
    rtft_fault_point = c_fault_point(rtft_c_string(name))
  end function

  ! 1 where RTFT_FAULT arms `name` with flag or flags (rtft.h), else 0.
  integer(c_int) function rtft_fault_flag(name)
    character(*), intent(in) :: name
    rtft_fault_flag = c_fault_flag(rtft_c_string(name))
  end function

end module rtft
