! SPDX-License-Identifier: Apache-2.0
!> api_checks.f90: the Fortran module's wrappers and error paths, run by tests/cabi/test_fortran.py
!> under mpiexec. Prints "rank r/n: K Fortran checks passed". Usage: api_checks_f [VERSION]
program api_checks
  use, intrinsic :: iso_c_binding, only: c_associated, c_double, c_f_pointer, c_int32_t, c_int64_t, c_loc, &
                                         c_null_ptr, c_ptr
  use redist
  implicit none

  integer, parameter :: m = 7, n = 5            ! global m x n, column-major, split by rows -> by columns
  integer(c_int32_t) :: rank, nranks
  integer :: nchecks = 0, nfail = 0
  integer(c_int64_t) :: r0, r1, c0, c1, i, j
  type(redist_t) :: h, hs
  type(redist_options_t) :: opts
  type(c_ptr) :: res
  real(c_double), allocatable, target :: a(:,:), pad(:,:)
  real(c_double), pointer :: b(:,:)
  character(len=64) :: version, want
  integer(c_int64_t), parameter :: one = 1_c_int64_t, eight = 8_c_int64_t

  version = ""
  if (command_argument_count() >= 1) call get_command_argument(1, version)
  rank = 0
  nranks = 1

  call truth(index(redist_error_message(int(REDIST_ERROR_INVALID_STATE, c_int32_t)), "INVALID_STATE") > 0, &
             "redist_error_message")
  if (len_trim(version) > 0) call truth(redist_string(redist_version()) == trim(version), "redist_version")
  call expect(redist_comm_rank(rank, nranks), REDIST_ERROR_NOT_INITIALIZED, "redist_initialize", "comm_rank early")

  call expect(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), REDIST_SUCCESS, "", "initialize")
  call expect(redist_comm_rank(rank, nranks), REDIST_SUCCESS, "", "comm_rank")
  call split(int(m, c_int64_t), r0, r1)
  call split(int(n, c_int64_t), c0, c1)
  allocate(a(r0:r1, n))
  do j = 1, n
    do i = r0, r1
      a(i, j) = value(i, j)
    end do
  end do

  ! bound arrays of different sizes: still collective, every rank fails
  call expect(redist_create_f(h, [r0, one], [r1], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a)), REDIST_ERROR_INVALID_VALUE, "bound arrays", &
              "create_f size mismatch")
  call truth(.not. c_associated(h%handle), "handle null after failure")
  ! a bad (0 = out of range, 1-based) lower bound on the last rank: every rank fails, naming it
  write (want, '(a,i0)') "rank ", nranks - 1
  call expect(redist_create_f(h, [merge(0_c_int64_t, r0, rank == nranks - 1), one], [r1, int(n, c_int64_t)], &
                              [one, c0], [int(m, c_int64_t), c1], eight, REDIST_MEMORY_HOST, addr(a)), &
              REDIST_ERROR_INVALID_VALUE, trim(want), "create_f bad box on the last rank")

  call expect(redist_create_f(h, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a)), REDIST_SUCCESS, "", "create_f")
  call expect(redist_execute(h, c_null_ptr, c_null_ptr, res), REDIST_ERROR_INVALID_STATE, "plan", &
              "execute before plan")
  call expect(redist_plan(h, c_null_ptr), REDIST_SUCCESS, "", "plan")
  call expect(redist_execute(h, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute")
  call check_columns(res, "engine-owned result")
  call expect(redist_graph(h, c_null_ptr, res), REDIST_ERROR_NOT_SUPPORTED, "CUDA", "graph on host")

  ! a strided operand: the interior of an array with one ghost cell on every side
  allocate(pad(r0 - 1:r1 + 1, 0:n + 1))
  pad = -1.0_c_double
  pad(r0:r1, 1:n) = a
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, c_loc(pad(r0, 1)), in_strides=[one, int(r1 - r0 + 3, c_int64_t)]), &
              REDIST_SUCCESS, "", "create_f strided")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan strided")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute strided")
  call check_columns(res, "strided operand")
  call expect(redist_free(hs), REDIST_SUCCESS, "", "free strided")

  ! options: the pack host method through redist_options_t; a wrong struct_size on the last rank
  call redist_options_init_f(opts)
  call truth(opts%version == REDIST_OPTIONS_VERSION .and. opts%order == REDIST_ORDER_F, "options defaults")
  opts%host_method = REDIST_HOST_METHOD_PACK
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_SUCCESS, "", "create_f options")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan options")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute options")
  call check_columns(res, "host method pack")
  call expect(redist_free(hs), REDIST_SUCCESS, "", "free options")
  ! a permuted result named Fortran's way: dimension 1 fastest, then 2 (the usual layout)
  call redist_options_result_order_f(opts, [1, 2])
  call truth(opts%result_ndim == 2 .and. opts%result_order(1) == 1 .and. opts%result_order(2) == 0, &
             "result_order_f: 1-based fastest first -> C's 0-based slowest first")
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_SUCCESS, "", "create_f result_order")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan result_order")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute result_order")
  call check_columns(res, "result_order (1, 2)")
  call expect(redist_free(hs), REDIST_SUCCESS, "", "free result_order")
  opts%result_ndim = 0
  if (rank == nranks - 1) opts%struct_size = opts%struct_size - 4
  write (want, '(a,i0)') "rank ", nranks - 1
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_ERROR_INVALID_VALUE, trim(want), &
              "wrong struct_size on the last rank")

  call expect(redist_free(h), REDIST_SUCCESS, "", "free")
  call expect(redist_execute(h, c_null_ptr, c_null_ptr, res), REDIST_ERROR_INVALID_STATE, "freed", &
              "execute after free")
  call expect(redist_finalize(), REDIST_SUCCESS, "", "finalize")

  if (nfail > 0) then
    write (*, '(a,i0,a,i0,a,i0,a,i0,a)') "rank ", rank, "/", nranks, ": ", nfail, " of ", nchecks, &
      " Fortran checks FAILED"
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a,i0,a)') "rank ", rank, "/", nranks, ": ", nchecks, " Fortran checks passed"

contains

  pure function value(i, j) result(v)
    integer(c_int64_t), intent(in) :: i, j
    real(c_double) :: v
    v = real(i + 100 * j, c_double)
  end function value

  subroutine split(extent, lo, hi)   ! this rank's 1-based inclusive slab of 1..extent
    integer(c_int64_t), intent(in) :: extent
    integer(c_int64_t), intent(out) :: lo, hi
    integer(c_int64_t) :: q, rem
    q = extent / nranks
    rem = mod(extent, int(nranks, c_int64_t))
    lo = rank * q + min(int(rank, c_int64_t), rem) + 1
    hi = lo + q - 1
    if (rank < rem) hi = hi + 1
  end subroutine split

  function addr(x) result(p)
    real(c_double), allocatable, intent(in), target :: x(:,:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(x) > 0) p = c_loc(x)
  end function addr

  subroutine check_columns(ptr, what)   ! the result: all m rows of columns c0..c1, column-major
    type(c_ptr), intent(in) :: ptr
    character(len=*), intent(in) :: what
    integer :: bad
    integer(c_int64_t) :: ii, jj
    bad = 0
    if (c1 >= c0) then
      call c_f_pointer(ptr, b, [int(m, c_int64_t), c1 - c0 + 1])
      do jj = c0, c1
        do ii = 1, m
          if (b(ii, jj - c0 + 1) /= value(ii, jj)) bad = bad + 1
        end do
      end do
    end if
    call truth(bad == 0, what)
  end subroutine check_columns

  subroutine truth(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    nchecks = nchecks + 1
    if (.not. cond) then
      nfail = nfail + 1
      write (*, '(a,i0,2a)') "rank ", rank, ": not true: ", what
    end if
  end subroutine truth

  subroutine expect(got, wanted, contains, what)
    integer(c_int32_t), intent(in) :: got
    integer, intent(in) :: wanted
    character(len=*), intent(in) :: contains, what
    character(len=:), allocatable :: msg
    nchecks = nchecks + 1
    msg = redist_last_error_message()
    if (got /= wanted .or. (wanted /= REDIST_SUCCESS .and. index(msg, contains) == 0)) then
      nfail = nfail + 1
      write (*, '(a,i0,3a,i0,a,i0)') "rank ", rank, ": ", what, ": returned ", got, ", expected ", wanted
      write (*, '(2a)') "  last error: ", msg
    end if
  end subroutine expect

end program api_checks
