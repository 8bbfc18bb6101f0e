! SPDX-License-Identifier: Apache-2.0
!
! bench_2decomp.f90: 2DECOMP&FFT's four pencil transposes, timed the way perf/bench_pencils.c times
! redist's, so that its PEER_TIMINGS file can hold this program's output -- and, in the same program,
! redist's same four transposes from Fortran (`use redist`, cabi/redist.f90) into the same arrays,
! each iteration timing 2DECOMP&FFT's call and then redist's.
!
!   mpif90 -O2 -march=native -I$D2D/include bench_2decomp.f90 $D2D/lib/libdecomp2d.a \
!          $(python -m redist.cabi flags --out DIR --fflags --flibs) -o bench_2decomp
!   mpiexec -n P ./bench_2decomp N P_ROW P_COL ITERS [boxes]
!
! (perf/bench_2decomp.sh builds 2DECOMP&FFT in a temporary directory and runs this.) An N^3 array on
! a P_ROW x P_COL grid (decomp_2d_init); transpose_x_to_y, y_to_z, z_to_y and y_to_x for real(8)
! and complex(8), each into the caller's arrays (the only way 2DECOMP&FFT works): X -> Y into uy,
! Y -> Z into uz, Z -> Y into uy, Y -> X into ux, as bench_pencils.c does. Per iteration and
! transpose: MPI_Barrier, MPI_Wtime around the call, the slowest rank (MPI_Allreduce MAX); median
! and minimum over ITERS iterations after 3 warm-up ones. Element value = global column-major index
! g (0-based), complex (g, -g - 0.5). One untimed pass into destinations poisoned with -1 checks
! that every transpose writes every element; every timed iteration's result is checked too. Before
! each library's timed call, untimed, the same for both (BENCH_BETWEEN, environment): its destination
! is poisoned with -1 (unset or "poison"), then each rank writes BENCH_EVICT_MIB (default 32) MiB of
! its own ("evict"), or nothing is done ("nothing"). BENCH_SYMMETRIC=1 (environment) puts every
! array (both libraries use the same ones) in redist's host symmetric memory
! (redist_allocate_symmetric_memory): redist's peers then store straight into them. Rank 0
! prints one line per case and library:
!   2DECOMP&FFT <real8|complex8> N P_ROW P_COL <x2y|y2z|z2y|y2x> <median ms> <min ms> <T|F>
!   redist-f90 <real8|complex8> N P_ROW P_COL <x2y|y2z|z2y|y2x> <median ms> <min ms> <T|F>
! (redist: redist_create_f on 2DECOMP&FFT's own pencil bounds, 1-based inclusive as Fortran gives
! them, the operand bound once, redist_execute into the destination array: out=.)
! With a fifth argument "boxes" every rank prints its pencils as 0-based half-open boxes instead,
! "rank R X lo0 lo1 lo2 hi0 hi1 hi2" (and Y, Z), to compare with bench_pencils.c's layout.
program bench_2decomp
   use, intrinsic :: iso_c_binding, only: c_f_pointer, c_int32_t, c_int64_t, c_loc, c_null_ptr, c_ptr
   use mpi
   use decomp_2d
   use decomp_2d_constants
   use redist
   implicit none

   integer, parameter :: warmup = 3
   character(len=3), parameter :: names(4) = ['x2y', 'y2z', 'z2y', 'y2x']
   integer :: n, prow, pcol, iters, ierr, rank, k, cplx
   character(len=32) :: arg
   real(8), pointer, contiguous :: rx(:, :, :), ry(:, :, :), rz(:, :, :)
   complex(8), pointer, contiguous :: cx(:, :, :), cy(:, :, :), cz(:, :, :)
   logical :: symmetric
   real(8), allocatable :: times(:, :), rtimes(:, :)
   logical :: good(4), rgood(4)
   type(redist_t) :: handles(4)
   character(len=16) :: between
   logical :: evict, poisoning
   integer :: evict_mib
   integer(1), allocatable :: junk(:)

   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   if (command_argument_count() < 4) then
      if (rank == 0) write (*, '(a)') 'usage: bench_2decomp N P_ROW P_COL ITERS [boxes]'
      call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
   end if
   call get_command_argument(1, arg); read (arg, *) n
   call get_command_argument(2, arg); read (arg, *) prow
   call get_command_argument(3, arg); read (arg, *) pcol
   call get_command_argument(4, arg); read (arg, *) iters
   call get_environment_variable('BENCH_BETWEEN', between)
   if (between /= 'poison' .and. between /= 'evict' .and. between /= 'nothing' .and. between /= '') then
      if (rank == 0) write (*, '(a)') 'BENCH_BETWEEN must be poison, evict or nothing, not '//trim(between)
      call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
   end if
   evict = between == 'evict'
   poisoning = between /= 'nothing'
   call get_environment_variable('BENCH_EVICT_MIB', arg, status=k)
   evict_mib = 32
   if (k == 0) read (arg, *) evict_mib
   if (evict) allocate (junk(evict_mib*1024*1024))
   call get_environment_variable('BENCH_SYMMETRIC', arg, status=k)
   symmetric = k == 0 .and. arg == '1'  ! every array in redist's host symmetric memory
   decomp_log = D2D_LOG_QUIET
   call decomp_2d_init(n, n, n, prow, pcol, complex_pool=.true.)  ! work buffers for complex(8) too
   call need(redist_initialize(int(MPI_COMM_WORLD, c_int32_t), REDIST_DEVICE_NONE), 'redist_initialize')

   if (command_argument_count() > 4) then
      call print_boxes()
      call need(redist_finalize(), 'redist_finalize')
      call decomp_2d_finalize()
      call MPI_Finalize(ierr)
      stop
   end if

   allocate (times(iters, 4), rtimes(iters, 4))
   if (symmetric) then
      call real_array(rx, xstart, xend)
      call real_array(ry, ystart, yend)
      call real_array(rz, zstart, zend)
      call complex_array(cx, xstart, xend)
      call complex_array(cy, ystart, yend)
      call complex_array(cz, zstart, zend)
   else
      allocate (rx(xstart(1):xend(1), xstart(2):xend(2), xstart(3):xend(3)))
      allocate (ry(ystart(1):yend(1), ystart(2):yend(2), ystart(3):yend(3)))
      allocate (rz(zstart(1):zend(1), zstart(2):zend(2), zstart(3):zend(3)))
      allocate (cx(xstart(1):xend(1), xstart(2):xend(2), xstart(3):xend(3)))
      allocate (cy(ystart(1):yend(1), ystart(2):yend(2), ystart(3):yend(3)))
      allocate (cz(zstart(1):zend(1), zstart(2):zend(2), zstart(3):zend(3)))
   end if
   call fill_real(rx)
   call fill_complex(cx)
   do cplx = 0, 1
      call create_handles()
      do k = 1, 4  ! once into a destination poisoned with -1: every element written, by both
         call poison(k)
         call move(k)
         good(k) = right(k)
         call poison(k)
         call redist_move(k)
         rgood(k) = right(k)
      end do
      call time_all()
      call report('2DECOMP&FFT', merge('complex8', 'real8   ', cplx == 1), times, good)
      call report('redist-f90', merge('complex8', 'real8   ', cplx == 1), rtimes, rgood)
      do k = 1, 4
         call need(redist_free(handles(k)), 'redist_free')
      end do
   end do
   if (symmetric) then
      call need(redist_free_symmetric_memory(c_loc(rx)), 'redist_free_symmetric_memory')
      call need(redist_free_symmetric_memory(c_loc(ry)), 'redist_free_symmetric_memory')
      call need(redist_free_symmetric_memory(c_loc(rz)), 'redist_free_symmetric_memory')
      call need(redist_free_symmetric_memory(c_loc(cx)), 'redist_free_symmetric_memory')
      call need(redist_free_symmetric_memory(c_loc(cy)), 'redist_free_symmetric_memory')
      call need(redist_free_symmetric_memory(c_loc(cz)), 'redist_free_symmetric_memory')
   else
      deallocate (rx, ry, rz, cx, cy, cz)
   end if

   call need(redist_finalize(), 'redist_finalize')
   call decomp_2d_finalize()
   call MPI_Finalize(ierr)

contains

   ! BENCH_SYMMETRIC=1: a pencil in host symmetric memory (redist_allocate_symmetric_memory), where
   ! redist's peers store straight into it; 2DECOMP&FFT reads and writes the same arrays
   function pencil_memory(lo, hi, isz, count) result(p)
      integer, intent(in) :: lo(3), hi(3), isz
      integer(c_int64_t), intent(out) :: count
      type(c_ptr) :: p
      count = product(int(hi - lo + 1, c_int64_t))
      call need(redist_allocate_symmetric_memory(p, isz*count), 'redist_allocate_symmetric_memory')
   end function pencil_memory

   subroutine real_array(a, lo, hi)
      real(8), pointer, contiguous, intent(out) :: a(:, :, :)
      integer, intent(in) :: lo(3), hi(3)
      real(8), pointer, contiguous :: flat(:)
      integer(c_int64_t) :: count
      call c_f_pointer(pencil_memory(lo, hi, 8, count), flat, [count])
      a(lo(1):hi(1), lo(2):hi(2), lo(3):hi(3)) => flat
   end subroutine real_array

   subroutine complex_array(a, lo, hi)
      complex(8), pointer, contiguous, intent(out) :: a(:, :, :)
      integer, intent(in) :: lo(3), hi(3)
      complex(8), pointer, contiguous :: flat(:)
      integer(c_int64_t) :: count
      call c_f_pointer(pencil_memory(lo, hi, 16, count), flat, [count])
      a(lo(1):hi(1), lo(2):hi(2), lo(3):hi(3)) => flat
   end subroutine complex_array

   ! the global (0-based, column-major) index of element (i, j, k), 1-based global coordinates
   pure real(8) function gidx(i, j, k)
      integer, intent(in) :: i, j, k
      gidx = real(i - 1, 8) + real(n, 8)*(real(j - 1, 8) + real(n, 8)*real(k - 1, 8))
   end function gidx

   subroutine fill_real(a)
      real(8), intent(out) :: a(xstart(1):, xstart(2):, xstart(3):)
      integer :: i, j, l
      do l = xstart(3), xend(3)
         do j = xstart(2), xend(2)
            do i = xstart(1), xend(1)
               a(i, j, l) = gidx(i, j, l)
            end do
         end do
      end do
   end subroutine fill_real

   subroutine fill_complex(a)
      complex(8), intent(out) :: a(xstart(1):, xstart(2):, xstart(3):)
      integer :: i, j, l
      do l = xstart(3), xend(3)
         do j = xstart(2), xend(2)
            do i = xstart(1), xend(1)
               a(i, j, l) = cmplx(gidx(i, j, l), -gidx(i, j, l) - 0.5d0, kind=8)
            end do
         end do
      end do
   end subroutine fill_complex

   ! every element of a, a pencil starting at global (1-based) st, equals its global index
   logical function right_real(a, st)
      real(8), intent(in) :: a(:, :, :)
      integer, intent(in) :: st(3)
      integer :: i, j, l
      right_real = .true.
      do l = 1, size(a, 3)
         do j = 1, size(a, 2)
            do i = 1, size(a, 1)
               if (a(i, j, l) /= gidx(i + st(1) - 1, j + st(2) - 1, l + st(3) - 1)) right_real = .false.
            end do
         end do
      end do
   end function right_real

   logical function right_complex(a, st)
      complex(8), intent(in) :: a(:, :, :)
      integer, intent(in) :: st(3)
      integer :: i, j, l
      real(8) :: g
      right_complex = .true.
      do l = 1, size(a, 3)
         do j = 1, size(a, 2)
            do i = 1, size(a, 1)
               g = gidx(i + st(1) - 1, j + st(2) - 1, l + st(3) - 1)
               if (a(i, j, l) /= cmplx(g, -g - 0.5d0, kind=8)) right_complex = .false.
            end do
         end do
      end do
   end function right_complex

   ! seconds of the slowest rank for the call just made
   real(8) function slowest(t0)
      real(8), intent(in) :: t0
      real(8) :: dt
      dt = MPI_Wtime() - t0
      call MPI_Allreduce(MPI_IN_PLACE, dt, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
      slowest = dt
   end function slowest

   ! transpose k (1: x2y, 2: y2z, 3: z2y, 4: y2x) of the current element type
   subroutine move(k)
      integer, intent(in) :: k
      select case (k + 4*cplx)
      case (1); call transpose_x_to_y(rx, ry)
      case (2); call transpose_y_to_z(ry, rz)
      case (3); call transpose_z_to_y(rz, ry)
      case (4); call transpose_y_to_x(ry, rx)
      case (5); call transpose_x_to_y(cx, cy)
      case (6); call transpose_y_to_z(cy, cz)
      case (7); call transpose_z_to_y(cz, cy)
      case default; call transpose_y_to_x(cy, cx)
      end select
   end subroutine move

   ! a redist status other than REDIST_SUCCESS: say which call failed, stop every rank
   subroutine need(status, what)
      integer(c_int32_t), intent(in) :: status
      character(len=*), intent(in) :: what
      if (status /= REDIST_SUCCESS) then
         write (*, '(a, i0, 3a)') 'rank ', rank, ': ', what, ' failed'
         call MPI_Abort(MPI_COMM_WORLD, 3, ierr)
      end if
   end subroutine need

   ! redist's handles for the four transposes of the current element type: 2DECOMP&FFT's pencil
   ! bounds, the operand bound once, planned
   subroutine create_handles()
      integer(c_int64_t) :: lo(3, 3), hi(3, 3), isz
      integer, parameter :: from(4) = [1, 2, 3, 2], to(4) = [2, 3, 2, 1]
      type(c_ptr) :: src(4)
      integer :: c
      lo(:, 1) = xstart; hi(:, 1) = xend
      lo(:, 2) = ystart; hi(:, 2) = yend
      lo(:, 3) = zstart; hi(:, 3) = zend
      if (cplx == 1) then
         isz = 16
         src = [c_loc(cx), c_loc(cy), c_loc(cz), c_loc(cy)]
      else
         isz = 8
         src = [c_loc(rx), c_loc(ry), c_loc(rz), c_loc(ry)]
      end if
      do c = 1, 4
         call need(redist_create_f(handles(c), lo(:, from(c)), hi(:, from(c)), lo(:, to(c)), hi(:, to(c)), isz, &
                                   REDIST_MEMORY_HOST, src(c)), 'redist_create_f')
         call need(redist_plan(handles(c), c_null_ptr), 'redist_plan')
      end do
   end subroutine create_handles

   ! redist's transpose k into its destination array (out=)
   subroutine redist_move(k)
      integer, intent(in) :: k
      type(c_ptr) :: res
      select case (k + 4*cplx)
      case (1, 3); call need(redist_execute(handles(k), c_null_ptr, c_loc(ry), res), 'redist_execute')
      case (2); call need(redist_execute(handles(k), c_null_ptr, c_loc(rz), res), 'redist_execute')
      case (4); call need(redist_execute(handles(k), c_null_ptr, c_loc(rx), res), 'redist_execute')
      case (5, 7); call need(redist_execute(handles(k), c_null_ptr, c_loc(cy), res), 'redist_execute')
      case (6); call need(redist_execute(handles(k), c_null_ptr, c_loc(cz), res), 'redist_execute')
      case default; call need(redist_execute(handles(k), c_null_ptr, c_loc(cx), res), 'redist_execute')
      end select
   end subroutine redist_move

   ! -1 into the destination of transpose k
   subroutine poison(k)
      integer, intent(in) :: k
      select case (k + 4*cplx)
      case (1, 3); ry = -1
      case (2); rz = -1
      case (4); rx = -1
      case (5, 7); cy = -1
      case (6); cz = -1
      case default; cx = -1
      end select
   end subroutine poison

   ! the destination of transpose k holds the global indices
   logical function right(k)
      integer, intent(in) :: k
      select case (k + 4*cplx)
      case (1, 3); right = right_real(ry, ystart)
      case (2); right = right_real(rz, zstart)
      case (4); right = right_real(rx, xstart)
      case (5, 7); right = right_complex(cy, ystart)
      case (6); right = right_complex(cz, zstart)
      case default; right = right_complex(cx, xstart)
      end select
   end function right

   ! ITERS timed iterations after the warm-up ones, each result checked: per transpose, 2DECOMP&FFT's
   ! call, then redist's, each library's call after the same untimed preparation (before)
   subroutine time_all()
      integer :: it, c
      do it = 1 - warmup, iters
         do c = 1, 4
            call before(c, it)
            call timed(c, it, .false., times, good)
            call before(c, it)
            call timed(c, it, .true., rtimes, rgood)
         end do
      end do
   end subroutine time_all

   ! what each rank does, untimed, before either library's transpose c (BENCH_BETWEEN): poison its
   ! destination with -1 (the default: then its owner's cache holds it, dirty, as after a solver's
   ! in-place work on it) and, with "evict", then write BENCH_EVICT_MIB (default 32) MiB of a buffer
   ! of its own (its private caches hold none of the exchange's data, as after other work); with
   ! "nothing", nothing (a tight loop: each library's last check has just read its destination)
   subroutine before(c, it)
      integer, intent(in) :: c, it
      if (poisoning) call poison(c)
      if (evict) then
         junk = int(mod(it + 100, 127), 1)
         if (junk(size(junk)) == -1) write (*, '(a)') ''  ! the stores are used: never removed
      end if
   end subroutine before

   ! one timed transpose c of iteration it (2DECOMP&FFT's, or redist's), recorded and checked
   subroutine timed(c, it, with_redist, tt, ok)
      integer, intent(in) :: c, it
      logical, intent(in) :: with_redist
      real(8), intent(inout) :: tt(:, :)
      logical, intent(inout) :: ok(4)
      real(8) :: t0
      call MPI_Barrier(MPI_COMM_WORLD, ierr)
      t0 = MPI_Wtime()
      if (with_redist) then
         call redist_move(c)
      else
         call move(c)
      end if
      t0 = slowest(t0)
      if (it >= 1) tt(it, c) = t0
      ok(c) = ok(c) .and. right(c)
   end subroutine timed

   ! rank 0: one PEER_TIMINGS line per transpose of library lib (correctness agreed over all ranks)
   subroutine report(lib, prec, tt, ok)
      character(len=*), intent(in) :: lib, prec
      real(8), intent(in) :: tt(:, :)
      logical, intent(in) :: ok(4)
      integer :: c
      logical :: all_good(4)
      real(8) :: t(iters)
      call MPI_Allreduce(ok, all_good, 4, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
      if (rank /= 0) return
      do c = 1, 4
         t = tt(:, c)
         call sort(t)
         write (*, '(a, 1x, a, 3(1x, i0), 1x, a, 2(1x, f0.4), 1x, l1)') lib, trim(prec), &
            n, prow, pcol, &
            names(c), 1d3*median(t), 1d3*t(1), all_good(c)
      end do
      flush (6)
   end subroutine report

   subroutine sort(t)
      real(8), intent(inout) :: t(:)
      integer :: i, j
      real(8) :: v
      do i = 2, size(t)
         v = t(i)
         j = i - 1
         do while (j >= 1)
            if (t(j) <= v) exit
            t(j + 1) = t(j)
            j = j - 1
         end do
         t(j + 1) = v
      end do
   end subroutine sort

   real(8) function median(t)
      real(8), intent(in) :: t(:)
      integer :: m
      m = size(t)
      if (mod(m, 2) == 1) then
         median = t(m/2 + 1)
      else
         median = 0.5d0*(t(m/2) + t(m/2 + 1))
      end if
   end function median

   subroutine print_boxes()
      integer :: r, nranks
      call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
      do r = 0, nranks - 1
         if (r == rank) then
            write (*, '(a, i0, a, 6(1x, i0))') 'rank ', rank, ' X', xstart - 1, xend
            write (*, '(a, i0, a, 6(1x, i0))') 'rank ', rank, ' Y', ystart - 1, yend
            write (*, '(a, i0, a, 6(1x, i0))') 'rank ', rank, ' Z', zstart - 1, zend
            flush (6)
         end if
         call MPI_Barrier(MPI_COMM_WORLD, ierr)
      end do
   end subroutine print_boxes

end program bench_2decomp
