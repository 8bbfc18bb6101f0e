! SPDX-License-Identifier: Apache-2.0
!> halo_transpose.f90: halo_transpose.c in Fortran: halos into a ghosted array, then a permuted
!> transpose, with `use redist`.
!>
!> u(1:nx, 1:ny) is column-major and split along y: this process holds columns y0..y1.
!>
!> 1. Halo exchange (opts%allow_overlap = 1): the output box is the process's columns grown by
!>    one on each side (clipped), so output boxes overlap. redist_execute_strided writes it
!>    straight into the interior rows of a ghosted array gh(0:nx+1, y0-1:y1+1) (element strides
!>    [1, nx + 2]); a Jacobi step then reads its neighbours there and updates u in place (the
!>    operand's address never changes, so nothing is rebound).
!> 2. Permuted transpose (redist_options_result_order_f(opts, [2, 1])): y-split -> x-split with
!>    dimension 2 varying fastest, so each row of the result is contiguous.
!>
!> Every process runs the same steps on the whole array and checks every element exactly.
!>
!>   gfortran halo_transpose.f90 $(python -m redist.cabi flags --out build --fflags --flibs) -o halo_transpose_f
!>   mpiexec -n 4 ./halo_transpose_f [NX NY STEPS]
program halo_transpose
  use, intrinsic :: iso_c_binding, only: c_double, c_f_pointer, c_int32_t, c_int64_t, c_loc, c_null_ptr, c_ptr
  use redist
  implicit none

  integer(c_int64_t) :: nx, ny, y0, y1, h0, h1, x0, x1, i, j
  integer :: steps, s, a, nbad
  integer(c_int32_t) :: rank, nranks
  character(len=32) :: arg
  real(c_double), allocatable, target :: u(:,:), gh(:,:)
  real(c_double), allocatable :: g(:,:), gn(:,:), un(:,:)
  real(c_double), pointer :: t(:,:)
  type(redist_t) :: halo, tr
  type(redist_options_t) :: opts
  type(c_ptr) :: res
  real(c_double), parameter :: sentinel = -7.0_c_double
  integer(c_int64_t), parameter :: one = 1_c_int64_t

  nx = 9
  ny = 11
  steps = 10
  do a = 1, min(command_argument_count(), 2)
    call get_command_argument(a, arg)
    if (a == 1) read (arg, *) nx
    if (a == 2) read (arg, *) ny
  end do
  if (command_argument_count() >= 3) then
    call get_command_argument(3, arg)
    read (arg, *) steps
  end if

  call check(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), "redist_initialize")
  call check(redist_comm_rank(rank, nranks), "redist_comm_rank")
  call split(ny, nranks, rank, y0, y1)
  h0 = y0
  h1 = y1
  if (y1 >= y0) then   ! the halo box; a process without columns needs nothing
    h0 = max(one, y0 - 1)
    h1 = min(ny, y1 + 1)
  end if
  allocate(u(nx, y0:y1), un(nx, y0:y1), gh(0:nx + 1, h0:h1), g(nx, ny), gn(nx, ny))
  do j = 1, ny
    do i = 1, nx
      g(i, j) = real(mod((i - 1 + (j - 1) * nx) * 7919_c_int64_t, 1009_c_int64_t), c_double)
    end do
  end do
  u = g(:, y0:y1)
  gh = sentinel

  call redist_options_init_f(opts)
  opts%allow_overlap = 1
  call check(redist_create_f(halo, [one, y0], [nx, y1], [one, h0], [nx, h1], 8_c_int64_t, REDIST_MEMORY_HOST, &
                             addr(u), options=opts), "redist_create_f(halo)")
  call check(redist_plan(halo, c_null_ptr), "redist_plan(halo)")

  nbad = 0
  do s = 1, steps
    ! the halo box lands in rows 1..nx of gh; rows 0 and nx+1 are ghost rows nobody writes
    if (h1 >= h0) then
      call check(redist_execute_strided(halo, c_null_ptr, c_loc(gh(1, h0)), [one, nx + 2], res), "execute_strided")
    else
      call check(redist_execute_strided(halo, c_null_ptr, c_null_ptr, [one, nx + 2], res), "execute_strided")
    end if
    nbad = nbad + count(gh(1:nx, h0:h1) /= g(:, h0:h1)) + count(gh(0, :) /= sentinel) + count(gh(nx + 1, :) /= sentinel)
    do j = y0, y1   ! Jacobi on my columns; the edges of the global field stay fixed
      do i = 1, nx
        un(i, j) = gh(i, j)
        if (i > 1 .and. i < nx .and. j > 1 .and. j < ny) &
          un(i, j) = 0.25_c_double * ((gh(i - 1, j) + gh(i + 1, j)) + (gh(i, j - 1) + gh(i, j + 1)))
      end do
    end do
    u = un   ! in place: the operand's address stays
    gn = g
    do j = 2, ny - 1
      do i = 2, nx - 1
        gn(i, j) = 0.25_c_double * ((g(i - 1, j) + g(i + 1, j)) + (g(i, j - 1) + g(i, j + 1)))
      end do
    end do
    g = gn
    nbad = nbad + count(u /= g(:, y0:y1))
  end do

  ! y-split -> x-split with dimension 2 fastest: the result holds row i of the field contiguously
  call split(nx, nranks, rank, x0, x1)
  call redist_options_init_f(opts)
  call redist_options_result_order_f(opts, [2, 1])
  call check(redist_create_f(tr, [one, y0], [nx, y1], [x0, one], [x1, ny], 8_c_int64_t, REDIST_MEMORY_HOST, &
                             addr(u), options=opts), "redist_create_f(transpose)")
  call check(redist_plan(tr, c_null_ptr), "redist_plan(transpose)")
  call check(redist_execute(tr, c_null_ptr, c_null_ptr, res), "redist_execute(transpose)")
  if (x1 >= x0) then
    call c_f_pointer(res, t, [ny, x1 - x0 + 1])   ! t(j, i - x0 + 1) = u(i, j)
    nbad = nbad + count(transpose(t) /= g(x0:x1, :))
  end if

  call check(redist_free(halo), "redist_free(halo)")
  call check(redist_free(tr), "redist_free(transpose)")
  call check(redist_finalize(), "redist_finalize")
  if (nbad /= 0) then
    write (*, '(a,i0,a,i0,a,i0,a)') "rank ", rank, "/", nranks, ": FAILED, ", nbad, " wrong elements"
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a)') "rank ", rank, "/", nranks, ": OK (Fortran), ", steps, &
    " halo steps and a permuted transpose of ", nx, " x ", ny, ", every element checked"

contains

  !> Slab rule (1-based, inclusive): the first mod(n, p) processes get one extra column.
  subroutine split(n, p, r, lo, hi)
    integer(c_int64_t), intent(in) :: n
    integer(c_int32_t), intent(in) :: p, r
    integer(c_int64_t), intent(out) :: lo, hi
    integer(c_int64_t) :: q, rem
    q = n / p
    rem = mod(n, int(p, c_int64_t))
    lo = r * q + min(int(r, c_int64_t), rem) + 1
    hi = lo + q - 1
    if (r < rem) hi = hi + 1
  end subroutine split

  !> c_loc of an array, or c_null_ptr when it is empty (c_loc of a zero-sized array is invalid).
  function addr(x) result(p)
    real(c_double), allocatable, intent(in), target :: x(:,:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(x) > 0) p = c_loc(x)
  end function addr

  !> Stop every process with redist's message on any failure (redist errors are collective).
  subroutine check(status, what)
    integer(c_int32_t), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= REDIST_SUCCESS) then
      write (*, '(a,i0,4a)') "rank ", rank, ": ", what, " failed: ", redist_error_message(status)
      write (*, '(2a)') "  ", redist_last_error_message()
      error stop 1
    end if
  end subroutine check

end program halo_transpose
