! SPDX-License-Identifier: Apache-2.0
!> heat_loop.f90: the heat_loop.c time loop in Fortran, with `use redist`.
!>
!> Two fields, a temperature u(x, y, z) and a second one v, are column-major and split along x:
!> this process holds w(x0:x1, 1:ny, 1:nz, f) (global, 1-based, inclusive bounds; f = 1 is u,
!> f = 2 is v). Each step redistributes both to a split along y in ONE exchange (a fields
!> handle, redist_create_fields_f: one message per peer for both; engine-owned results), sweeps
!> along x there, redistributes both back into the other buffer (out=), sweeps along y, and
!> rebinds the operands with redist_reset_operands_unchecked. Every element of both fields is
!> checked after both redistributions against the same steps on the whole arrays.
!>
!> No MPI module needed: redist initializes MPI (REDIST_COMM_WORLD) and gives rank and size.
!>
!>   python -m redist.cabi build --out build          # also builds build/redist.mod, libredist_f.a
!>   gfortran heat_loop.f90 $(python -m redist.cabi flags --out build --fflags --flibs) -o heat_loop_f
!>   mpiexec -n 4 ./heat_loop_f [NX NY NZ STEPS]
program heat_loop
  use, intrinsic :: iso_c_binding, only: c_double, c_f_pointer, c_int32_t, c_int64_t, c_loc, c_null_ptr, &
                                         c_ptr, c_associated
  use redist
  implicit none

  integer, parameter :: nf = 2                  ! the fields: 1 = u, 2 = v
  integer(c_int64_t), parameter :: sizes(nf) = [8_c_int64_t, 8_c_int64_t]   ! bytes per element, per field
  integer(c_int64_t) :: gs(3), x0, x1, y0, y1
  integer :: steps, s, a, nbad, f
  integer(c_int32_t) :: rank, nranks
  character(len=32) :: arg
  real(c_double), allocatable, target :: w0(:,:,:,:), w1(:,:,:,:), scratch(:,:,:,:)
  real(c_double), allocatable :: g(:,:,:,:)
  real(c_double), pointer :: nxt(:,:,:,:), rflat(:,:,:), r(:,:,:)
  type(redist_t) :: fwd, back
  type(c_ptr) :: rp(nf), res(nf), pcur(nf), pnxt(nf)
  integer(c_int64_t) :: i, j, k

  gs = [13_c_int64_t, 10_c_int64_t, 7_c_int64_t]
  steps = 20
  do a = 1, min(command_argument_count(), 3)
    call get_command_argument(a, arg)
    read (arg, *) gs(a)
  end do
  if (command_argument_count() >= 4) then
    call get_command_argument(4, arg)
    read (arg, *) steps
  end if

  call check(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), "redist_initialize")
  call check(redist_comm_rank(rank, nranks), "redist_comm_rank")

  call split(gs(1), nranks, rank, x0, x1)   ! Slab along x
  call split(gs(2), nranks, rank, y0, y1)   ! Slab along y
  allocate(w0(x0:x1, gs(2), gs(3), nf), w1(x0:x1, gs(2), gs(3), nf), scratch(gs(1), y0:y1, gs(3), nf))
  allocate(g(gs(1), gs(2), gs(3), nf))
  ! u(i, j, k) = its global column-major index n, v = -n - 1/2: any misplaced element shows
  do k = 1, gs(3)
    do j = 1, gs(2)
      do i = 1, gs(1)
        g(i, j, k, 1) = real((i - 1) + (j - 1) * gs(1) + (k - 1) * gs(1) * gs(2), c_double)
        g(i, j, k, 2) = -0.5_c_double - g(i, j, k, 1)
      end do
    end do
  end do
  w0 = g(x0:x1, :, :, :)

  ! fwd: x-split -> y-split; back: y-split -> x-split (its operands are fwd's results, bound per step)
  call check(redist_create_fields_f(fwd, [x0, 1_c_int64_t, 1_c_int64_t], [x1, gs(2), gs(3)], &
                                    [1_c_int64_t, y0, 1_c_int64_t], [gs(1), y1, gs(3)], &
                                    sizes, REDIST_MEMORY_HOST, addrs(w0)), "redist_create_fields_f(fwd)")
  call check(redist_create_fields_f(back, [1_c_int64_t, y0, 1_c_int64_t], [gs(1), y1, gs(3)], &
                                    [x0, 1_c_int64_t, 1_c_int64_t], [x1, gs(2), gs(3)], &
                                    sizes, REDIST_MEMORY_HOST, addrs(scratch)), "redist_create_fields_f(back)")
  call check(redist_plan(fwd, c_null_ptr), "redist_plan(fwd)")
  call check(redist_plan(back, c_null_ptr), "redist_plan(back)")

  nbad = 0
  do s = 0, steps - 1
    if (mod(s, 2) == 0) then
      nxt => w1
      pcur = addrs(w0)
      pnxt = addrs(w1)
    else
      nxt => w0
      pcur = addrs(w1)
      pnxt = addrs(w0)
    end if
    call check(redist_reset_operands_unchecked(fwd, pcur), "redist_reset_operands_unchecked(fwd)")
    call check(redist_execute_fields(fwd, c_null_ptr, [(c_null_ptr, f = 1, nf)], rp), "redist_execute_fields(fwd)")
    do f = 1, nf
      ! field f's engine-owned result: gs(1) x (y1-y0+1) x gs(3), column-major, valid until the next execute
      call c_f_pointer(rp(f), rflat, [gs(1), y1 - y0 + 1, gs(3)])
      r(1:, y0:, 1:) => rflat
      nbad = nbad + count(r /= g(:, y0:y1, :, f))
      do k = 1, gs(3)
        do j = y0, y1
          call sweep(r(:, j, k))
        end do
        do j = 1, gs(2)
          call sweep(g(:, j, k, f))
        end do
      end do
    end do

    call check(redist_reset_operands_unchecked(back, rp), "redist_reset_operands_unchecked(back)")
    call check(redist_execute_fields(back, c_null_ptr, pnxt, res), "redist_execute_fields(back)")
    do f = 1, nf
      if (.not. c_associated(res(f), pnxt(f)) .and. size(nxt) > 0) nbad = nbad + 1
      do k = 1, gs(3)
        do i = x0, x1
          call sweep(nxt(i, :, k, f))
        end do
        do i = 1, gs(1)
          call sweep(g(i, :, k, f))
        end do
      end do
    end do
    nbad = nbad + count(nxt /= g(x0:x1, :, :, :))
  end do

  call check(redist_free(fwd), "redist_free(fwd)")
  call check(redist_free(back), "redist_free(back)")
  call check(redist_finalize(), "redist_finalize")

  if (nbad /= 0) then
    write (*, '(a,i0,a,i0,a,i0,a)') "rank ", rank, "/", nranks, ": FAILED, ", nbad, " wrong elements"
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a)') "rank ", rank, "/", nranks, ": OK (Fortran), ", steps, &
    " steps, every element of both fields ", gs(1), " x ", gs(2), " x ", gs(3), " checked"

contains

  !> Slab rule (1-based, inclusive): the first mod(n, p) processes get one extra plane.
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

  !> One explicit diffusion sweep along a periodic line (the same code for both copies).
  subroutine sweep(line)
    real(c_double), intent(inout) :: line(:)
    real(c_double) :: t(size(line))
    integer :: n, m
    n = size(line)
    t = line
    do m = 1, n
      line(m) = t(m) + 0.25_c_double * (t(modulo(m - 2, n) + 1) - 2.0_c_double * t(m) + t(modulo(m, n) + 1))
    end do
  end subroutine sweep

  !> c_loc of each field x(:, :, :, f), or c_null_ptr when the box is empty (c_loc of a
  !> zero-sized array is invalid). The dummy is allocatable so that no temporary copy can stand
  !> in for the caller's array: the addresses must stay valid after the call.
  function addrs(x) result(p)
    real(c_double), allocatable, intent(in), target :: x(:,:,:,:)
    type(c_ptr) :: p(size(x, 4))
    integer :: f
    p = c_null_ptr
    if (size(x) == 0) return
    do f = 1, size(x, 4)
      p(f) = c_loc(x(lbound(x, 1), lbound(x, 2), lbound(x, 3), f))
    end do
  end function addrs

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

end program heat_loop
