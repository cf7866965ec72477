! A Fortran program protected by rt-ft through the module over the C API (include/rtft/rtft.f90):
! each rank's float64 array, a shard of one global array, is changed every step through the step
! bracket, with a max all-reduced over the ranks. Run by fortran_job_test under dp-launch with its
! own process SIGKILLed in a step (RTFT_FAULT): restarted on its slot, it resumes from its L1
! snapshot; every rank then checks its array against the same steps computed without rt-ft, bit
! for bit, and prints "fortran <rank>: PASS".
!
!   protect_test STEPS
program protect_test
  use rtft
  implicit none
  integer, parameter :: n = 1000
  real(c_double), allocatable, target :: x(:)
  real(c_double), allocatable :: want(:, :)
  real(c_double), target :: local_max, global_max
  type(c_ptr) :: rt, state, p, comm
  integer(c_int) :: rank, world, role, rc
  integer(c_int64_t) :: step, steps, offset, count
  character(32) :: arg

  call get_command_argument(1, arg)
  read (arg, *) steps
  call check(rtft_runtime_create(rt), 'rtft_runtime_create')
  call check(rtft_runtime_rank(rt, rank), 'rank')
  call check(rtft_runtime_world_size(rt, world), 'world')
  call check(rtft_runtime_role(rt, role), 'role')
  call check(rtft_even_split(int(n, c_int64_t)*world, world, rank, offset, count), 'split')
  allocate (x(count))
  call initial(x, rank)
  write (*, '(a,i0,a,i0,a,a)') 'fortran ', rank, ': role ', role, ' rt-ft ', rtft_version()

  call check(rtft_state_create(state), 'state')
  call check(rtft_state_add_shard(state, 'x', RTFT_FLOAT64, [count], [int(n, c_int64_t)*world], &
                                  [offset], c_loc(x)), 'add_shard')
  rc = rtft_state_add_tensor(state, 'x', RTFT_FLOAT64, [count], c_loc(x))
  if (rc /= RTFT_INVALID_ARGUMENT .or. index(rtft_error_message(), 'used twice') == 0) then
    write (*, '(a)') 'fortran: FAIL: a name used twice was not refused'
    error stop 1
  end if
  ! A replicated shard reaches the C API (refused there: its name is taken) or, with sizes that
  ! disagree, is refused before it.
  rc = rtft_state_add_replicated_shard(state, 'x', RTFT_FLOAT64, [count], &
                                       [int(n, c_int64_t)*world], [offset], c_loc(x))
  if (rc /= RTFT_INVALID_ARGUMENT .or. &
      index(rtft_error_message(), 'rtft_state_add_replicated_shard') == 0) then
    write (*, '(a)') 'fortran: FAIL: a replicated shard of a name used twice was not refused'
    error stop 1
  end if
  rc = rtft_state_add_replicated_shard(state, 'y', RTFT_FLOAT64, [count], [1_c_int64_t, 2_c_int64_t], &
                                       [offset], c_loc(x))
  if (rc /= RTFT_INVALID_ARGUMENT) then
    write (*, '(a)') 'fortran: FAIL: a replicated shard of mismatched sizes was not refused'
    error stop 1
  end if
  call check(rtft_protector_create(rt, c_null_ptr, p), 'protector')
  call check(rtft_protector_protect(p, state, c_null_funptr, c_null_ptr), 'protect')
  call check(rtft_state_destroy(state), 'state_destroy')
  call check(rtft_protector_start(p, step), 'start')
  if (step > 0) write (*, '(a,i0,a,i0)') 'fortran ', rank, ': resumed at step ', step
  call check(rtft_protector_comm(p, comm), 'comm')

  do while (step < steps)
    rc = one_step(step)
    if (rc == RTFT_OK) then
      step = step + 1
    else if (rc == RTFT_ABORTED) then
      rc = rtft_protector_recover(p, step)  ! every rank back to one step
      if (rc == RTFT_SHUTDOWN) stop
      call check(rc, 'recover')
      write (*, '(a,i0,a,i0)') 'fortran ', rank, ': recovered at step ', step
    else
      call check(rc, 'step')
    end if
  end do

  ! The same steps without rt-ft, every rank's array, in the same order of operations.
  allocate (want(n, 0:world - 1))
  do step = 0, steps - 1
    global_max = -huge(1.0_c_double)
    do rc = 0, world - 1
      if (step == 0) call initial(want(:, rc), rc)
      global_max = max(global_max, maxval(want(:, rc)))
    end do
    do rc = 0, world - 1
      want(:, rc) = 0.5_c_double*want(:, rc) + 1.0e-3_c_double*global_max + real(step, c_double)
    end do
  end do
  call check(rtft_protector_destroy(p), 'protector_destroy')
  call check(rtft_runtime_destroy(rt), 'runtime_destroy')
  if (any(x /= want(:, rank))) then
    write (*, '(a,i0,a)') 'fortran ', rank, ': FAIL: the array differs from the steps without rt-ft'
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a)') 'fortran ', rank, ': PASS (', steps, ' steps)'

contains

  subroutine initial(a, r)
    real(c_double), intent(out) :: a(:)
    integer(c_int), intent(in) :: r
    integer :: i
    do i = 1, size(a)
      a(i) = real(r*size(a) + i, c_double)/7.0_c_double
    end do
  end subroutine

  ! Step s: the max over every rank (read while rt-ft copies the array), then the update.
  integer(c_int) function one_step(s) result(rc)
    integer(c_int64_t), intent(in) :: s
    rc = rtft_protector_begin_step(p, s)
    if (rc /= RTFT_OK) return
    local_max = maxval(x)
    rc = rtft_comm_all_reduce(comm, c_loc(local_max), c_loc(global_max), 1_c_size_t, &
                              RTFT_FLOAT64, RTFT_MAX)
    if (rc /= RTFT_OK) return
    rc = rtft_protector_before_update(p)
    if (rc /= RTFT_OK) return
    x = 0.5_c_double*x + 1.0e-3_c_double*global_max + real(s, c_double)
    rc = rtft_protector_end_step(p)
  end function

  subroutine check(status, what)
    integer(c_int), intent(in) :: status
    character(*), intent(in) :: what
    if (status == RTFT_OK) return
    write (*, '(a,a,a,i0,a,a)') 'fortran: ', what, ': ', status, ' ', rtft_error_message()
    error stop 1
  end subroutine

end program protect_test
