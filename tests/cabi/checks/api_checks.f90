! SPDX-License-Identifier: Apache-2.0
!> api_checks.f90: the Fortran module's wrappers and error paths, run by tests/cabi/test_fortran.py
!> under mpiexec. Prints "rank r/n: K Fortran checks passed". Usage: api_checks_f [VERSION]
program api_checks
  use, intrinsic :: iso_c_binding, only: c_associated, c_double, c_f_pointer, c_float, c_int32_t, c_int64_t, c_loc, &
                                         c_null_ptr, c_ptr
  use redist
  implicit none

  integer, parameter :: m = 7, n = 5            ! global m x n, column-major, split by rows -> by columns
  integer(c_int32_t) :: rank, nranks
  integer :: nchecks = 0, nfail = 0
  integer(c_int64_t) :: r0, r1, c0, c1, hc0, hc1, i, j
  type(redist_t) :: h, hs, hf
  type(c_ptr) :: resf(2)
  real(c_float), allocatable, target :: af(:,:)
  real(c_float), pointer :: bf(:,:)
  integer(c_int32_t) :: nfl
  type(redist_options_t) :: opts
  type(c_ptr) :: res
  real(c_double), allocatable, target :: a(:,:), pad(:,:), ghosted(:,:)
  integer :: bad, i32
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

  ! global_shape (dimension 1 first): checked against the bounding box of the input boxes
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), global_shape=[int(m, c_int64_t), int(n, c_int64_t)]), &
              REDIST_SUCCESS, "", "create_f global_shape")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan global_shape")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute global_shape")
  call check_columns(res, "global_shape")
  call expect(redist_free(hs), REDIST_SUCCESS, "", "free global_shape")
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), global_shape=[int(m, c_int64_t), int(n + 1, c_int64_t)]), &
              REDIST_ERROR_INVALID_VALUE, "but the inferred global shape is", "create_f wrong global_shape")
  call expect(redist_create_fields_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], &
                                     [eight], REDIST_MEMORY_HOST, [addr(a)], global_shape=[int(m, c_int64_t)]), &
              REDIST_ERROR_INVALID_VALUE, "or global_shape, differ", "create_fields_f global_shape of 1 axis")
  ! tune: measured (version 4 of the options), exported, forgotten, imported, used from wisdom
  do i32 = REDIST_TUNE_MEASURE, REDIST_TUNE_WISDOM
    call redist_options_init_f(opts)
    opts%tune = int(i32, c_int32_t)
    call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                                REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_SUCCESS, "", "create_f tune")
    call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan tune")
    call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute tune")
    call check_columns(res, "tune")
    call expect(redist_free(hs), REDIST_SUCCESS, "", "free tune")
    if (i32 == REDIST_TUNE_MEASURE) then
      call expect(redist_export_wisdom_f("redist-f90-wisdom.json", nfl), REDIST_SUCCESS, "", "export wisdom")
      call truth(nfl >= 1, "export wisdom: entries")
      call expect(redist_forget_wisdom(), REDIST_SUCCESS, "", "forget wisdom")
      call expect(redist_import_wisdom_f("redist-f90-wisdom.json", nfl), REDIST_SUCCESS, "", "import wisdom")
      call truth(nfl >= 1, "import wisdom: entries")
    end if
  end do
  if (rank == 0) then
    open(newunit=i32, file="redist-f90-wisdom.json", status="old")
    close(i32, status="delete")
  end if

  ! options: the pack host method through redist_options_t; a wrong struct_size on the last rank
  call redist_options_init_f(opts)
  call truth(opts%version == REDIST_OPTIONS_VERSION .and. opts%order == REDIST_ORDER_F, "options defaults")
  opts%host_method = REDIST_HOST_METHOD_PACK
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_SUCCESS, "", "create_f options")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan options")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute options")
  call check_columns(res, "host method pack")
  ! redist_execute_strided: straight into the interior of an array with one ghost cell per side
  allocate(ghosted(0:m + 1, c0 - 1:c1 + 1))
  ghosted = -1.0_c_double
  call expect(redist_execute_strided(hs, c_null_ptr, c_loc(ghosted(1, c0)), [one, int(m + 2, c_int64_t)], res), &
              REDIST_SUCCESS, "", "execute_strided into a ghosted array")
  call truth(all(ghosted(0, :) == -1.0_c_double) .and. all(ghosted(m + 1, :) == -1.0_c_double) .and. &
             all(ghosted(:, c0 - 1) == -1.0_c_double) .and. all(ghosted(:, c1 + 1) == -1.0_c_double), &
             "execute_strided: ghost cells untouched")
  bad = 0
  do j = c0, c1
    do i = 1, m
      if (ghosted(i, j) /= value(i, j)) bad = bad + 1
    end do
  end do
  call truth(bad == 0, "execute_strided: interior")
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
  ! a permuted transpose: dimension 2 fastest, so each row of the result is contiguous
  call redist_options_result_order_f(opts, [2, 1])
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_SUCCESS, "", "create_f transposed")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan transposed")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute transposed")
  call check_rows_of_columns(res, c0, c1, "result_order (2, 1): rows contiguous")
  call expect(redist_free(hs), REDIST_SUCCESS, "", "free transposed")
  opts%result_ndim = 0
  ! an axis list longer than REDIST_MAX_NDIM, or empty, is refused by create (not cut short)
  call redist_options_result_order_f(opts, [(int(i), i = 17, 1, -1)])
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_ERROR_INVALID_VALUE, "result_ndim", &
              "result_order_f with 17 axes")
  call redist_options_result_order_f(opts, [integer ::])
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_ERROR_INVALID_VALUE, "result_ndim", &
              "result_order_f with no axes")
  opts%result_ndim = 0
  ! halos: each rank's columns grown by one on each side (clipped), boxes overlap: allow_overlap
  opts%allow_overlap = 1
  hc0 = merge(max(one, c0 - 1), c0, c1 >= c0)
  hc1 = merge(min(int(n, c_int64_t), c1 + 1), c1, c1 >= c0)
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, hc0], [int(m, c_int64_t), hc1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_SUCCESS, "", "create_f halo")
  call expect(redist_plan(hs, c_null_ptr), REDIST_SUCCESS, "", "plan halo")
  call expect(redist_execute(hs, c_null_ptr, c_null_ptr, res), REDIST_SUCCESS, "", "execute halo")
  call check_block(res, hc0, hc1, "halo columns (allow_overlap)")
  call expect(redist_free(hs), REDIST_SUCCESS, "", "free halo")
  opts%allow_overlap = 0
  if (rank == nranks - 1) opts%struct_size = opts%struct_size - 4
  write (want, '(a,i0)') "rank ", nranks - 1
  call expect(redist_create_f(hs, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], eight, &
                              REDIST_MEMORY_HOST, addr(a), options=opts), REDIST_ERROR_INVALID_VALUE, trim(want), &
              "wrong struct_size on the last rank")

  ! two fields in one exchange: a double one (the interior of the ghosted pad: strides in column
  ! 1 of in_strides) and a float one (dense), 1-based field numbers in redist_reset_operand_field_f
  allocate(af(r0:r1, n))
  af = real(-a, c_float)
  call expect(redist_create_fields_f(hf, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], &
                                     [eight, 4_c_int64_t], REDIST_MEMORY_HOST, [c_loc(pad(r0, 1)), c_loc(af)], &
                                     in_strides=reshape([one, r1 - r0 + 3, one, r1 - r0 + 1], [2, 2])), &
              REDIST_SUCCESS, "", "create_fields_f")
  call expect(redist_get_nfields(hf, nfl), REDIST_SUCCESS, "", "get_nfields")
  call truth(nfl == 2, "get_nfields: 2")
  call expect(redist_plan(hf, c_null_ptr), REDIST_SUCCESS, "", "plan fields")
  call expect(redist_execute_fields(hf, c_null_ptr, [c_null_ptr, c_null_ptr], resf), REDIST_SUCCESS, "", &
              "execute_fields")
  call check_columns(resf(1), "fields: the double field")
  call c_f_pointer(resf(2), bf, [int(m, c_int64_t), c1 - c0 + 1])
  call truth(all(bf == real(-reshape([((value(i, j), i = 1, m), j = c0, c1)], [m, int(c1 - c0 + 1)]), c_float)), &
             "fields: the float field")
  call expect(redist_reset_operand_field_f(hf, 1, c_loc(pad(r0, 1))), REDIST_SUCCESS, "", "reset_operand_field_f")
  call expect(redist_reset_operand_field_f(hf, 2, c_loc(af), unchecked=.true.), REDIST_SUCCESS, "", &
              "reset_operand_field_f unchecked")
  call expect(redist_reset_operand_field_f(hf, 0, c_loc(af), unchecked=.true.), REDIST_ERROR_INVALID_VALUE, &
              "got -1", "reset_operand_field_f unchecked out of range (local)")
  call expect(redist_reset_operand_field_f(hf, 3, c_loc(af)), REDIST_ERROR_INVALID_VALUE, "field must be in 0..1", &
              "reset_operand_field_f out of range")
  call expect(redist_execute(hf, c_null_ptr, c_null_ptr, res), REDIST_ERROR_INVALID_VALUE, "redist_create_fields", &
              "one-array execute on a fields handle")
  call expect(redist_execute_fields(h, c_null_ptr, [c_null_ptr], resf), REDIST_ERROR_INVALID_VALUE, "one array", &
              "execute_fields on a one-array handle")
  call expect(redist_free(hf), REDIST_SUCCESS, "", "free fields")
  ! field arrays of different sizes: still collective, every rank fails
  call expect(redist_create_fields_f(hf, [r0, one], [r1, int(n, c_int64_t)], [one, c0], [int(m, c_int64_t), c1], &
                                     [eight], REDIST_MEMORY_HOST, [c_loc(a), c_loc(af)]), REDIST_ERROR_INVALID_VALUE, &
              "field arrays differ", "create_fields_f size mismatch")

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
    call check_block(ptr, c0, c1, what)
  end subroutine check_columns

  subroutine check_block(ptr, k0, k1, what)   ! all m rows of columns k0..k1, column-major
    type(c_ptr), intent(in) :: ptr
    integer(c_int64_t), intent(in) :: k0, k1
    character(len=*), intent(in) :: what
    integer :: bad
    integer(c_int64_t) :: ii, jj
    bad = 0
    if (k1 >= k0) then
      call c_f_pointer(ptr, b, [int(m, c_int64_t), k1 - k0 + 1])
      do jj = k0, k1
        do ii = 1, m
          if (b(ii, jj - k0 + 1) /= value(ii, jj)) bad = bad + 1
        end do
      end do
    end if
    call truth(bad == 0, what)
  end subroutine check_block

  subroutine check_rows_of_columns(ptr, k0, k1, what)   ! columns k0..k1 of all m rows, row-major
    type(c_ptr), intent(in) :: ptr
    integer(c_int64_t), intent(in) :: k0, k1
    character(len=*), intent(in) :: what
    integer :: bad
    integer(c_int64_t) :: ii, jj
    bad = 0
    if (k1 >= k0) then
      call c_f_pointer(ptr, b, [k1 - k0 + 1, int(m, c_int64_t)])
      do ii = 1, m
        do jj = k0, k1
          if (b(jj - k0 + 1, ii) /= value(ii, jj)) bad = bad + 1
        end do
      end do
    end if
    call truth(bad == 0, what)
  end subroutine check_rows_of_columns

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
