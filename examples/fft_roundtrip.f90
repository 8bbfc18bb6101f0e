! SPDX-License-Identifier: Apache-2.0
!> fft_roundtrip.f90: the pencil FFT of examples/fft3d.py in Fortran, through redist's C ABI, with FFTW.
!>
!> A real field u(x, y, z) of nx x ny x nz points (column-major: x fastest) lives on a p1 x p2
!> process grid in three pencil orientations (1-based inclusive global bounds; x runs over the
!> nx/2+1 complex points after the first transform):
!>
!>   physical   x whole, y split over p1, z over p2    r2c along x         memory (x, y, z)
!>   middle     y whole, x split over p1, z over p2    c2c along y         memory (y, x, z): order [2, 1, 3]
!>   spectral   z whole, x split over p1, y over p2    c2c along z         memory (z, x, y): order [3, 1, 2]
!>
!> Each redist exchange writes (out=) into an array this program owns, laid out by
!> redist_options_result_order_f so that the next transform's lines are contiguous; the transform
!> writes the next array (out of place), which the next exchange reads as its operand, described by
!> in_strides. Four handles (forward:
!> physical -> middle -> spectral; backward: spectral -> middle -> physical) and the FFTW plans
!> are made once; then STEPS forward + backward round trips. Checked: the spectral pencils against
!> FFTW's serial 3-D r2c of the whole field, and every round trip against the field (relative
!> error below 1e-12).
!>
!> No MPI module needed (the mpich wheel has none): redist initializes MPI and gives rank and size.
!>
!>   python -m redist.cabi build --out build
!>   apt-get install libfftw3-dev                       # FFTW 3 and its Fortran 2003 interface, fftw3.f03
!>   gfortran -I/usr/include examples/fft_roundtrip.f90 $(python -m redist.cabi flags --out build --fflags --flibs) \
!>            -lfftw3 -o fft_roundtrip
!>   mpiexec -n 4 ./fft_roundtrip [NX NY NZ [P1 P2 [STEPS]]]      # default 12 10 9, grid near square, 5 steps
module fftw3
  use, intrinsic :: iso_c_binding
  implicit none
  include 'fftw3.f03'
end module fftw3

program fft_roundtrip
  use, intrinsic :: iso_c_binding, only: c_double, c_double_complex, c_int, c_int32_t, c_int64_t, c_loc, &
                                         c_null_ptr, c_ptr, c_associated
  use fftw3, only: fftw_plan_many_dft, fftw_plan_many_dft_r2c, fftw_plan_many_dft_c2r, fftw_plan_dft_r2c_3d, &
                   fftw_execute_dft, fftw_execute_dft_r2c, fftw_execute_dft_c2r, fftw_destroy_plan, &
                   FFTW_FORWARD, FFTW_BACKWARD, FFTW_ESTIMATE
  use redist
  implicit none

  integer(c_int64_t), parameter :: one = 1_c_int64_t, zsize = 16_c_int64_t   ! bytes of a complex(c_double)
  integer(c_int64_t) :: n(3), nxh, y0, y1, z0, z1, mx0, mx1, sy0, sy1, myl, mxl, mzl, syl, i, j, k
  integer :: p1, p2, c1, c2, steps, s, a
  integer(c_int32_t) :: rank, nranks
  character(len=32) :: arg
  real(c_double), allocatable, target :: g(:,:,:), u(:,:,:), back(:,:,:)
  complex(c_double_complex), allocatable, target :: a_fwd(:,:,:), mid_fwd(:,:,:), mid_hat(:,:,:), spec_in(:,:,:)
  complex(c_double_complex), allocatable, target :: spec(:,:,:), ghat(:,:,:), work(:,:,:), mid_bwd(:,:,:)
  complex(c_double_complex), allocatable, target :: mid_back(:,:,:), a_bwd(:,:,:)
  type(redist_t) :: to_mid, to_spec, back_mid, back_phys
  type(redist_options_t) :: opts
  type(c_ptr) :: res, p_r2c, p_y, p_z, p_zi, p_yi, p_c2r, p_ref
  real(c_double) :: err, scale

  n = [12_c_int64_t, 10_c_int64_t, 9_c_int64_t]
  steps = 5
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    if (arg == "--help" .or. arg == "-h") then
      write (*, '(a)') "usage: mpiexec -n P fft_roundtrip [NX NY NZ [P1 P2 [STEPS]]]", &
        "  forward + backward 3-D real-to-complex FFTs of an NX x NY x NZ field (default 12 10 9) on a", &
        "  P1 x P2 process grid (default near square), STEPS round trips (default 5), redist exchanges", &
        "  between pencils and FFTW lines; checked against FFTW's serial 3-D transform (1e-12)."
      stop
    end if
  end if
  p1 = 0
  p2 = 0
  do a = 1, min(command_argument_count(), 3)
    call get_command_argument(a, arg)
    read (arg, *) n(a)
  end do
  if (command_argument_count() >= 5) then
    call get_command_argument(4, arg)
    read (arg, *) p1
    call get_command_argument(5, arg)
    read (arg, *) p2
  end if
  if (command_argument_count() >= 6) then
    call get_command_argument(6, arg)
    read (arg, *) steps
  end if

  call check(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), "redist_initialize")
  call check(redist_comm_rank(rank, nranks), "redist_comm_rank")
  if (p1 == 0) then   ! near square: the largest divisor of nranks not above its square root
    p1 = 1
    do a = 1, nranks
      if (mod(nranks, a) == 0 .and. a * a <= nranks) p1 = a
    end do
    p2 = nranks / p1
  end if
  if (p1 * p2 /= nranks) then
    write (*, '(a,i0,a,i0,a,i0,a)') "rank ", rank, ": grid ", p1, " x ", p2, " does not match the ranks"
    error stop 2
  end if
  c1 = mod(rank, p1)   ! grid coordinates, the first fastest
  c2 = rank / p1
  nxh = n(1) / 2 + 1
  call split(n(2), p1, c1, y0, y1)      ! physical: y over p1, z over p2
  call split(n(3), p2, c2, z0, z1)
  call split(nxh, p1, c1, mx0, mx1)     ! middle and spectral: complex x over p1
  call split(n(2), p2, c2, sy0, sy1)    ! spectral: y over p2
  myl = y1 - y0 + 1
  mzl = z1 - z0 + 1
  mxl = mx1 - mx0 + 1
  syl = sy1 - sy0 + 1

  ! the whole field on every rank (to check against), and this rank's physical pencil of it
  allocate(g(n(1), n(2), n(3)), ghat(nxh, n(2), n(3)))
  do k = 1, n(3)
    do j = 1, n(2)
      do i = 1, n(1)
        g(i, j, k) = sin(0.37_c_double * i + 0.11_c_double * j * j) * cos(0.23_c_double * k * i) + 0.01_c_double * j
      end do
    end do
  end do
  allocate(u(n(1), myl, mzl), back(n(1), myl, mzl), a_fwd(nxh, myl, mzl), a_bwd(nxh, myl, mzl))
  allocate(mid_fwd(n(2), mxl, mzl), mid_hat(n(2), mxl, mzl), mid_bwd(n(2), mxl, mzl), mid_back(n(2), mxl, mzl))
  allocate(spec_in(n(3), mxl, syl), spec(n(3), mxl, syl), work(n(3), mxl, syl))
  u = g(:, y0:y1, z0:z1)

  ! the four exchanges: fixed operands, out= into the arrays above (their memory orders)
  call redist_options_init_f(opts)
  call redist_options_result_order_f(opts, [2, 1, 3])
  call check(redist_create_f(to_mid, [one, y0, z0], [nxh, y1, z1], [mx0, one, z0], [mx1, n(2), z1], zsize, &
                             REDIST_MEMORY_HOST, addr(a_fwd), options=opts), "redist_create_f(physical -> middle)")
  call redist_options_init_f(opts)
  call redist_options_result_order_f(opts, [3, 1, 2])
  call check(redist_create_f(to_spec, [mx0, one, z0], [mx1, n(2), z1], [mx0, sy0, one], [mx1, sy1, n(3)], zsize, &
                             REDIST_MEMORY_HOST, addr(mid_hat), in_strides=[n(2), one, n(2) * mxl], options=opts), &
             "redist_create_f(middle -> spectral)")
  call redist_options_init_f(opts)
  call redist_options_result_order_f(opts, [2, 1, 3])
  call check(redist_create_f(back_mid, [mx0, sy0, one], [mx1, sy1, n(3)], [mx0, one, z0], [mx1, n(2), z1], zsize, &
                             REDIST_MEMORY_HOST, addr(work), in_strides=[n(3), n(3) * mxl, one], options=opts), &
             "redist_create_f(spectral -> middle)")
  call check(redist_create_f(back_phys, [mx0, one, z0], [mx1, n(2), z1], [one, y0, z0], [nxh, y1, z1], zsize, &
                             REDIST_MEMORY_HOST, addr(mid_back), in_strides=[n(2), one, n(2) * mxl]), &
             "redist_create_f(middle -> physical)")
  call check(redist_plan(to_mid, c_null_ptr), "redist_plan(physical -> middle)")
  call check(redist_plan(to_spec, c_null_ptr), "redist_plan(middle -> spectral)")
  call check(redist_plan(back_mid, c_null_ptr), "redist_plan(spectral -> middle)")
  call check(redist_plan(back_phys, c_null_ptr), "redist_plan(middle -> physical)")

  ! FFTW plans, once: batches of contiguous lines (a rank with an empty pencil has none)
  p_r2c = c_null_ptr
  p_c2r = c_null_ptr
  p_y = c_null_ptr
  p_yi = c_null_ptr
  p_z = c_null_ptr
  p_zi = c_null_ptr
  if (size(u) > 0) then
    p_r2c = fftw_plan_many_dft_r2c(1, [int(n(1), c_int)], int(myl * mzl, c_int), u, [int(n(1), c_int)], 1, &
                                   int(n(1), c_int), a_fwd, [int(nxh, c_int)], 1, int(nxh, c_int), FFTW_ESTIMATE)
    p_c2r = fftw_plan_many_dft_c2r(1, [int(n(1), c_int)], int(myl * mzl, c_int), a_bwd, [int(nxh, c_int)], 1, &
                                   int(nxh, c_int), back, [int(n(1), c_int)], 1, int(n(1), c_int), FFTW_ESTIMATE)
  end if
  if (size(mid_fwd) > 0) then
    p_y = lines(n(2), mxl * mzl, mid_fwd, mid_hat, FFTW_FORWARD)
    p_yi = lines(n(2), mxl * mzl, mid_bwd, mid_back, FFTW_BACKWARD)
  end if
  if (size(spec) > 0) then
    p_z = lines(n(3), mxl * syl, spec_in, spec, FFTW_FORWARD)
    p_zi = lines(n(3), mxl * syl, spec, work, FFTW_BACKWARD)
  end if
  ! FFTW_ESTIMATE plans leave their arrays alone: g and u still hold the field
  p_ref = fftw_plan_dft_r2c_3d(int(n(3), c_int), int(n(2), c_int), int(n(1), c_int), g, ghat, FFTW_ESTIMATE)
  call fftw_execute_dft_r2c(p_ref, g, ghat)
  scale = 1.0_c_double / real(n(1) * n(2) * n(3), c_double)

  err = 0
  do s = 1, steps
    ! forward: r2c along x, physical -> middle, c2c along y, middle -> spectral, c2c along z
    if (size(u) > 0) call fftw_execute_dft_r2c(p_r2c, u, a_fwd)
    call check(redist_execute(to_mid, c_null_ptr, addr(mid_fwd), res), "redist_execute(physical -> middle)")
    if (size(mid_fwd) > 0) call fftw_execute_dft(p_y, mid_fwd, mid_hat)
    call check(redist_execute(to_spec, c_null_ptr, addr(spec_in), res), "redist_execute(middle -> spectral)")
    if (size(spec) > 0) call fftw_execute_dft(p_z, spec_in, spec)
    ! spec(k, i, j) is the transform at (mx0 + i - 1, sy0 + j - 1, k): compare with the serial one
    do j = 1, syl
      do i = 1, mxl
        err = max(err, maxval(abs(spec(:, i, j) - ghat(mx0 + i - 1, sy0 + j - 1, :))) / maxval(abs(ghat)))
      end do
    end do
    ! backward (unnormalised lines, scaled once at the end); spec is not modified
    if (size(work) > 0) call fftw_execute_dft(p_zi, spec, work)
    call check(redist_execute(back_mid, c_null_ptr, addr(mid_bwd), res), "redist_execute(spectral -> middle)")
    if (size(mid_bwd) > 0) call fftw_execute_dft(p_yi, mid_bwd, mid_back)
    call check(redist_execute(back_phys, c_null_ptr, addr(a_bwd), res), "redist_execute(middle -> physical)")
    if (size(u) > 0) call fftw_execute_dft_c2r(p_c2r, a_bwd, back)
    back = back * scale
    if (size(u) > 0) err = max(err, maxval(abs(back - g(:, y0:y1, z0:z1))) / maxval(abs(g)))
    u = back   ! the next step transforms what came back
  end do

  do a = 1, 7
    select case (a)
    case (1); res = p_r2c
    case (2); res = p_c2r
    case (3); res = p_y
    case (4); res = p_yi
    case (5); res = p_z
    case (6); res = p_zi
    case default; res = p_ref
    end select
    if (c_associated(res)) call fftw_destroy_plan(res)
  end do
  call check(redist_free(to_mid), "redist_free")
  call check(redist_free(to_spec), "redist_free")
  call check(redist_free(back_mid), "redist_free")
  call check(redist_free(back_phys), "redist_free")
  call check(redist_finalize(), "redist_finalize")
  if (.not. (err <= 1e-12_c_double)) then
    write (*, '(a,i0,a,i0,a,es10.3)') "rank ", rank, "/", nranks, ": FAILED, max relative error ", err
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,a,es9.2)') "rank ", rank, "/", nranks, &
    ": OK (Fortran + FFTW), ", steps, " round trips of ", n(1), " x ", n(2), " x ", n(3), " on a ", p1, " x ", p2, &
    " grid, max relative error ", err

contains

  !> Part r (0-based) of p of 1..n, 1-based inclusive: points r*n/p + 1 .. (r+1)*n/p. Any exact
  !> tiling will do: redist takes each rank's box as given (empty when n < p for some parts).
  subroutine split(n, p, r, lo, hi)
    integer(c_int64_t), intent(in) :: n
    integer, intent(in) :: p, r
    integer(c_int64_t), intent(out) :: lo, hi
    lo = (r * n) / p + 1
    hi = ((r + 1) * n) / p
  end subroutine split

  !> An FFTW plan over `howmany` contiguous lines of length `len`, from x into y.
  function lines(len, howmany, x, y, sign) result(plan)
    integer(c_int64_t), intent(in) :: len, howmany
    complex(c_double_complex), intent(inout) :: x(:,:,:), y(:,:,:)
    integer(c_int), intent(in) :: sign
    type(c_ptr) :: plan
    plan = fftw_plan_many_dft(1, [int(len, c_int)], int(howmany, c_int), x, [int(len, c_int)], 1, int(len, c_int), &
                              y, [int(len, c_int)], 1, int(len, c_int), sign, FFTW_ESTIMATE)
  end function lines

  !> c_loc of an array, or c_null_ptr when it is empty (c_loc of a zero-sized array is invalid).
  function addr(x) result(p)
    complex(c_double_complex), allocatable, intent(in), target :: x(:,:,:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(x) > 0) p = c_loc(x)
  end function addr

  !> Stop with redist's message on any failure (redist's errors are collective: every rank stops).
  subroutine check(status, what)
    integer(c_int32_t), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status == REDIST_SUCCESS) return
    write (*, '(a,i0,6a)') "rank ", rank, ": ", what, ": ", redist_error_message(status), new_line('a'), &
      redist_last_error_message()
    error stop 1
  end subroutine check

end program fft_roundtrip
