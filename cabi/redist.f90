! SPDX-License-Identifier: Apache-2.0
!> redist for Fortran: redistribute a distributed N-D array across MPI processes.
!>
!> Standard Fortran 2008 + ISO_C_BINDING over the C API of redist.h (libredist.so); compiles
!> with gfortran, flang, ifx and nvfortran.
!>
!> * Every function returns its status (an integer(c_int32_t), 0 = REDIST_SUCCESS) as its
!>   result; there is no global error variable. redist_last_error_message() gives the detailed
!>   message of the last failure as a Fortran string.
!> * The bind(C) interfaces have the C names and follow the C prototypes exactly: C boxes are
!>   0-based and half-open. redist_create_f() is the Fortran-native way to create a handle:
!>   1-based inclusive bounds, column-major (order F) arrays.
!> * The MPI communicator is an integer Fortran handle (the `mpi` module's integer, or
!>   `comm%MPI_VAL` with mpi_f08), or REDIST_COMM_WORLD. If MPI is not initialized yet,
!>   redist_initialize() initializes it and redist_finalize() finalizes it, so a program
!>   without an MPI module can use REDIST_COMM_WORLD and redist_comm_rank().
!> * Collective functions (initialize, finalize, create, plan, execute, reset_operand, free)
!>   are called by every process; their errors are reported on every process.
!> * Several fields of the same boxes (u, v, w) move in ONE exchange through one handle:
!>   redist_create_fields_f, then redist_execute_fields, redist_reset_operands(_unchecked) and
!>   redist_reset_operand_field_f (1-based field; unchecked=.true. for the hot path). Messages
!>   count fields from 0, as C does.
!>
!> Example (a 3-D array split along its first axis, re-split along its second axis):
!>
!>     use redist
!>     type(redist_t) :: h
!>     real(c_double), allocatable, target :: u(:,:,:)     ! this process's box, column-major
!>     type(c_ptr) :: res
!>     ierr = redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE)
!>     ierr = redist_create_f(h, [x0, 1_8, 1_8], [x1, ny, nz], [1_8, y0, 1_8], [nx, y1, nz], &
!>                            8_c_int64_t, REDIST_MEMORY_HOST, c_loc(u))
!>     ierr = redist_plan(h, c_null_ptr)
!>     ierr = redist_execute(h, c_null_ptr, c_null_ptr, res)   ! res: engine-owned result
!>     call c_f_pointer(res, v, [nx, y1 - y0 + 1, nz])
module redist
  use, intrinsic :: iso_c_binding, only: c_associated, c_char, c_double, c_f_pointer, c_int, c_int32_t, c_int64_t, &
                                         c_loc, c_null_char, c_null_ptr, c_ptr, c_size_t, c_sizeof
  implicit none
  private

  !> Opaque handle of one redistribution (C: redist_t). Starts out null.
  type, bind(C), public :: redist_t
    type(c_ptr) :: handle = c_null_ptr
  end type redist_t

  ! redist_status_t
  integer(c_int), parameter, public :: REDIST_SUCCESS = 0                 !< success
  integer(c_int), parameter, public :: REDIST_ERROR_INVALID_VALUE = 1     !< bad argument (boxes, sizes, handle)
  integer(c_int), parameter, public :: REDIST_ERROR_INVALID_STATE = 2     !< wrong call order (execute before plan...)
  integer(c_int), parameter, public :: REDIST_ERROR_NOT_INITIALIZED = 3   !< redist_initialize() not called
  integer(c_int), parameter, public :: REDIST_ERROR_NOT_SUPPORTED = 4     !< not supported here
  integer(c_int), parameter, public :: REDIST_ERROR_CUDA = 5              !< CUDA / NVRTC / NVSHMEM failure
  integer(c_int), parameter, public :: REDIST_ERROR_COMMUNICATION = 6     !< MPI / NVSHMEM communication failure
  integer(c_int), parameter, public :: REDIST_ERROR_INTERNAL = 7          !< bug in redist
  integer(c_int), parameter, public :: REDIST_ERROR_PYTHON_INIT = 8       !< embedded Python could not start
  ! redist_order_t
  integer(c_int), parameter, public :: REDIST_ORDER_C = 0                 !< row-major
  integer(c_int), parameter, public :: REDIST_ORDER_F = 1                 !< column-major (Fortran)
  ! redist_memory_t
  integer(c_int), parameter, public :: REDIST_MEMORY_HOST = 0             !< host memory (MPI)
  integer(c_int), parameter, public :: REDIST_MEMORY_DEVICE = 1           !< CUDA device memory (NVSHMEM)
  ! redist_transport_t
  integer(c_int32_t), parameter, public :: REDIST_TRANSPORT_AUTO = 0        !< push where reachable, put elsewhere
  integer(c_int32_t), parameter, public :: REDIST_TRANSPORT_PUSH = 1        !< peers' results written directly
  integer(c_int32_t), parameter, public :: REDIST_TRANSPORT_PUT = 2         !< pack, NVSHMEM put, unpack
  ! redist_host_method_t
  integer(c_int32_t), parameter, public :: REDIST_HOST_METHOD_AUTO = 0      !< push on one node, else hybrid
  integer(c_int32_t), parameter, public :: REDIST_HOST_METHOD_HYBRID = 1    !< datatype or pack per message
  integer(c_int32_t), parameter, public :: REDIST_HOST_METHOD_DATATYPE = 2  !< MPI derived datatypes
  integer(c_int32_t), parameter, public :: REDIST_HOST_METHOD_PACK = 3      !< pack / unpack via staging
  integer(c_int32_t), parameter, public :: REDIST_HOST_METHOD_ALLTOALLW = 4 !< persistent MPI-4 Alltoallw
  integer(c_int32_t), parameter, public :: REDIST_HOST_METHOD_PUSH = 5      !< one node: shared-memory stores
  ! redist_signal_t
  integer(c_int32_t), parameter, public :: REDIST_SIGNAL_EPOCH = 0          !< device epochs, no NVSHMEM barrier
  integer(c_int32_t), parameter, public :: REDIST_SIGNAL_BARRIER = 1        !< NVSHMEM team barriers
  ! redist_tune_t
  integer(c_int32_t), parameter, public :: REDIST_TUNE_ESTIMATE = 0         !< the heuristic, nothing timed
  integer(c_int32_t), parameter, public :: REDIST_TUNE_MEASURE = 1          !< time every candidate route
  integer(c_int32_t), parameter, public :: REDIST_TUNE_WISDOM = 2           !< the stored answer, else measure
  integer(c_int32_t), parameter, public :: REDIST_OPTIONS_VERSION = 4       !< version of redist_options_t

  !> Options of redist_create_ex (C: redist_options_t). Set them up with redist_options_init_f,
  !> which fills struct_size and version, then change the fields you need.
  type, bind(C), public :: redist_options_t
    integer(c_size_t) :: struct_size = 0_c_size_t     !< c_sizeof(the options): set by redist_options_init_f
    integer(c_int32_t) :: version = 0_c_int32_t       !< REDIST_OPTIONS_VERSION
    integer(c_int32_t) :: order = 1_c_int32_t         !< REDIST_ORDER_F (Fortran default) or REDIST_ORDER_C
    integer(c_int32_t) :: transport = 0_c_int32_t     !< REDIST_TRANSPORT_*
    integer(c_int32_t) :: host_method = 0_c_int32_t   !< REDIST_HOST_METHOD_*
    integer(c_int32_t) :: blocking = 0_c_int32_t      !< 1: device execution waits for the result
    integer(c_int32_t) :: signal = 0_c_int32_t        !< REDIST_SIGNAL_*
    integer(c_int32_t) :: result_ndim = 0_c_int32_t   !< 0: dense in `order`; else set by redist_options_result_order_f
    integer(c_int32_t) :: result_order(16) = 0_c_int32_t  !< C's view: 0-based axes, slowest first
    integer(c_int32_t) :: allow_overlap = 0_c_int32_t !< 1: boxes may overlap (allgather, halos, replicas)
    type(c_ptr) :: global_shape = c_null_ptr          !< set by redist_create_f's global_shape argument
    integer(c_int32_t) :: tune = 0_c_int32_t          !< REDIST_TUNE_* (version 4)
    integer(c_int32_t) :: tune_out = 0_c_int32_t      !< 1: tune times calls into an out (version 4)
    real(c_double) :: tune_budget = 0.0_c_double       !< seconds of measuring per plan; 0: 10 (version 4)
  end type redist_options_t

  ! redist_initialize() arguments
  integer(c_int32_t), parameter, public :: REDIST_COMM_WORLD = -1         !< use MPI_COMM_WORLD
  integer(c_int32_t), parameter, public :: REDIST_DEVICE_AUTO = -1        !< local rank modulo visible GPUs
  integer(c_int32_t), parameter, public :: REDIST_DEVICE_NONE = -2        !< never touch a GPU

  public :: redist_initialize, redist_finalize, redist_comm_rank, redist_create, redist_plan, redist_execute
  public :: redist_execute_strided
  public :: redist_reset_operand, redist_reset_operand_unchecked, redist_release_operand, redist_free
  public :: redist_graph, redist_get_error_string, redist_get_last_error, redist_version
  public :: redist_update_graph_exec, redist_release_captured
  public :: redist_allocate_symmetric_memory, redist_free_symmetric_memory
  public :: redist_create_ex, redist_options_init_f, redist_options_result_order_f
  public :: redist_create_f, redist_string, redist_last_error_message, redist_error_message
  public :: redist_create_fields, redist_get_nfields, redist_execute_fields, redist_execute_fields_strided
  public :: redist_reset_operands, redist_reset_operands_unchecked, redist_reset_operand_field
  public :: redist_reset_operand_field_unchecked
  public :: redist_create_fields_f, redist_reset_operand_field_f
  public :: redist_export_wisdom, redist_import_wisdom, redist_forget_wisdom
  public :: redist_export_wisdom_f, redist_import_wisdom_f

  ! The C API, one interface per function of redist.h. A C argument passed by value is `value`
  ! here; the handle, a struct holding one pointer, is passed exactly like C's redist_t.
  interface
    !> Collective. fortran_comm: integer MPI handle or REDIST_COMM_WORLD; device_id: ordinal,
    !> REDIST_DEVICE_AUTO or REDIST_DEVICE_NONE.
    function redist_initialize(fortran_comm, device_id) bind(C, name="redist_initialize") result(status)
      import :: c_int32_t
      integer(c_int32_t), value :: fortran_comm
      integer(c_int32_t), value :: device_id
      integer(c_int32_t) :: status
    end function redist_initialize

    !> Collective. Frees every live handle, then shuts redist down (and MPI, if redist started it).
    function redist_finalize() bind(C, name="redist_finalize") result(status)
      import :: c_int32_t
      integer(c_int32_t) :: status
    end function redist_finalize

    !> Collective. Write this job's wisdom (rank 0's) to `path` (NUL-terminated; see
    !> redist_export_wisdom_f), atomically; entries: how many.
    function redist_export_wisdom(path, entries) bind(C, name="redist_export_wisdom") result(status)
      import :: c_char, c_int32_t
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int32_t), intent(out) :: entries
      integer(c_int32_t) :: status
    end function redist_export_wisdom

    !> Collective. Add the entries of the wisdom file `path` (NUL-terminated); entries: how many.
    !> A missing, corrupt, stale or foreign file is a logged warning, never an error.
    function redist_import_wisdom(path, entries) bind(C, name="redist_import_wisdom") result(status)
      import :: c_char, c_int32_t
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int32_t), intent(out) :: entries
      integer(c_int32_t) :: status
    end function redist_import_wisdom

    !> Collective. Forget every process's wisdom.
    function redist_forget_wisdom() bind(C, name="redist_forget_wisdom") result(status)
      import :: c_int32_t
      integer(c_int32_t) :: status
    end function redist_forget_wisdom

    !> This process's rank (0-based) and the number of processes in redist's communicator.
    function redist_comm_rank(rank, nranks) bind(C, name="redist_comm_rank") result(status)
      import :: c_int32_t
      integer(c_int32_t), intent(out) :: rank
      integer(c_int32_t), intent(out) :: nranks
      integer(c_int32_t) :: status
    end function redist_comm_rank

    !> Collective: nbytes of host symmetric memory (shared with the other processes of this node),
    !> for an out= the peers store into straight (host push). Map it with c_f_pointer(ptr, array, shape).
    !> Valid until redist_free_symmetric_memory or redist_finalize.
    function redist_allocate_symmetric_memory(ptr, nbytes) bind(C, name="redist_allocate_symmetric_memory") &
        result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      type(c_ptr), intent(out) :: ptr
      integer(c_int64_t), value :: nbytes
      integer(c_int32_t) :: status
    end function redist_allocate_symmetric_memory

    !> Collective: free memory of redist_allocate_symmetric_memory (the same allocation on every process).
    function redist_free_symmetric_memory(ptr) bind(C, name="redist_free_symmetric_memory") result(status)
      import :: c_int32_t, c_ptr
      type(c_ptr), value :: ptr
      integer(c_int32_t) :: status
    end function redist_free_symmetric_memory

    !> Collective. C conventions: 0-based, half-open boxes [lower, upper); in_strides is
    !> c_null_ptr (dense in `order`) or c_loc of an integer(c_int64_t) array of element strides.
    !> Prefer redist_create_f from Fortran.
    function redist_create(handle, ndim, in_lower, in_upper, in_strides, out_lower, out_upper, element_size, &
                           order, memory, operand) bind(C, name="redist_create") result(status)
      import :: redist_t, c_int, c_int32_t, c_int64_t, c_ptr
      type(redist_t), intent(out) :: handle
      integer(c_int32_t), value :: ndim
      integer(c_int64_t), intent(in) :: in_lower(*)
      integer(c_int64_t), intent(in) :: in_upper(*)
      type(c_ptr), value :: in_strides
      integer(c_int64_t), intent(in) :: out_lower(*)
      integer(c_int64_t), intent(in) :: out_upper(*)
      integer(c_int64_t), value :: element_size
      integer(c_int), value :: order
      integer(c_int), value :: memory
      type(c_ptr), value :: operand
      integer(c_int32_t) :: status
    end function redist_create

    !> Collective. redist_create with options (order, transport, host method, blocking); C
    !> conventions as redist_create. options: from redist_options_init_f.
    function redist_create_ex(handle, ndim, in_lower, in_upper, in_strides, out_lower, out_upper, element_size, &
                              memory, operand, options) bind(C, name="redist_create_ex") result(status)
      import :: redist_t, redist_options_t, c_int, c_int32_t, c_int64_t, c_ptr
      type(redist_t), intent(out) :: handle
      integer(c_int32_t), value :: ndim
      integer(c_int64_t), intent(in) :: in_lower(*)
      integer(c_int64_t), intent(in) :: in_upper(*)
      type(c_ptr), value :: in_strides
      integer(c_int64_t), intent(in) :: out_lower(*)
      integer(c_int64_t), intent(in) :: out_upper(*)
      integer(c_int64_t), value :: element_size
      integer(c_int), value :: memory
      type(c_ptr), value :: operand
      type(redist_options_t), intent(in) :: options
      integer(c_int32_t) :: status
    end function redist_create_ex

    !> Collective. Several fields in one exchange, C conventions as redist_create_ex: nfields
    !> arrays of the same boxes; in_strides is c_null_ptr (every field dense in `order`) or c_loc
    !> of an integer(c_int64_t) array (ndim, nfields); element_sizes(nfields); operands(nfields):
    !> c_loc of each field. Prefer redist_create_fields_f from Fortran.
    function redist_create_fields(handle, nfields, ndim, in_lower, in_upper, in_strides, out_lower, out_upper, &
                                  element_sizes, memory, operands, options) bind(C, name="redist_create_fields") &
        result(status)
      import :: redist_t, redist_options_t, c_int, c_int32_t, c_int64_t, c_ptr
      type(redist_t), intent(out) :: handle
      integer(c_int32_t), value :: nfields
      integer(c_int32_t), value :: ndim
      integer(c_int64_t), intent(in) :: in_lower(*)
      integer(c_int64_t), intent(in) :: in_upper(*)
      type(c_ptr), value :: in_strides
      integer(c_int64_t), intent(in) :: out_lower(*)
      integer(c_int64_t), intent(in) :: out_upper(*)
      integer(c_int64_t), intent(in) :: element_sizes(*)
      integer(c_int), value :: memory
      type(c_ptr), intent(in) :: operands(*)
      type(redist_options_t), intent(in) :: options
      integer(c_int32_t) :: status
    end function redist_create_fields

    !> The number of fields of a redist_create_fields handle; 0 for a one-array handle.
    function redist_get_nfields(handle, nfields) bind(C, name="redist_get_nfields") result(status)
      import :: redist_t, c_int32_t
      type(redist_t), value :: handle
      integer(c_int32_t), intent(out) :: nfields
      integer(c_int32_t) :: status
    end function redist_get_nfields

    !> Collective. stream: a cudaStream_t (device execution) or c_null_ptr.
    function redist_plan(handle, stream) bind(C, name="redist_plan") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: stream
      integer(c_int32_t) :: status
    end function redist_plan

    !> Collective. out = c_null_ptr: result is the engine-owned result (valid until the next
    !> execute or free); otherwise the result is written to out and result = out. Device memory:
    !> out may be any memory of the process's GPU (c_loc of a CUDA Fortran device array, cudaMalloc).
    function redist_execute(handle, stream, out, result) bind(C, name="redist_execute") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: stream
      type(c_ptr), value :: out
      type(c_ptr), intent(out) :: result
      integer(c_int32_t) :: status
    end function redist_execute

    !> Collective: redist_execute into an `out` of any element strides, one per
    !> dimension, e.g. the interior of an array with ghost cells: out_strides = [1, m + 2] for
    !> a(1:m, 1:n) inside g(0:m+1, 0:n+1). `out` is the address of the box's first element.
    function redist_execute_strided(handle, stream, out, out_strides, result) &
        bind(C, name="redist_execute_strided") result(status)
      import :: redist_t, c_int32_t, c_int64_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: stream
      type(c_ptr), value :: out
      integer(c_int64_t), intent(in) :: out_strides(*)
      type(c_ptr), intent(out) :: result
      integer(c_int32_t) :: status
    end function redist_execute_strided

    !> Collective: every field of a redist_create_fields handle in one exchange. outs(nfields):
    !> c_null_ptr (that field's engine-owned result) or where to write it (dense);
    !> results(nfields): the results' addresses.
    function redist_execute_fields(handle, stream, outs, results) bind(C, name="redist_execute_fields") &
        result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: stream
      type(c_ptr), intent(in) :: outs(*)
      type(c_ptr), intent(out) :: results(*)
      integer(c_int32_t) :: status
    end function redist_execute_fields

    !> Collective: redist_execute_fields into outs of any element strides: out_strides(ndim, nfields)
    !> (a column per field, ignored where outs(f) is c_null_ptr).
    function redist_execute_fields_strided(handle, stream, outs, out_strides, results) &
        bind(C, name="redist_execute_fields_strided") result(status)
      import :: redist_t, c_int32_t, c_int64_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: stream
      type(c_ptr), intent(in) :: outs(*)
      integer(c_int64_t), intent(in) :: out_strides(*)
      type(c_ptr), intent(out) :: results(*)
      integer(c_int32_t) :: status
    end function redist_execute_fields_strided

    !> Collective: new operands(nfields) for every field, checked on every process.
    function redist_reset_operands(handle, operands) bind(C, name="redist_reset_operands") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), intent(in) :: operands(*)
      integer(c_int32_t) :: status
    end function redist_reset_operands

    !> New operands(nfields) for every field, no checks: the time-loop hot path.
    function redist_reset_operands_unchecked(handle, operands) bind(C, name="redist_reset_operands_unchecked") &
        result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), intent(in) :: operands(*)
      integer(c_int32_t) :: status
    end function redist_reset_operands_unchecked

    !> Collective: a new operand for field `field` only, 0-based (C); see redist_reset_operand_field_f.
    function redist_reset_operand_field(handle, field, operand) bind(C, name="redist_reset_operand_field") &
        result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      integer(c_int32_t), value :: field
      type(c_ptr), value :: operand
      integer(c_int32_t) :: status
    end function redist_reset_operand_field

    !> A new operand for field `field` only, 0-based (C), no checks but the field's range.
    function redist_reset_operand_field_unchecked(handle, field, operand) &
        bind(C, name="redist_reset_operand_field_unchecked") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      integer(c_int32_t), value :: field
      type(c_ptr), value :: operand
      integer(c_int32_t) :: status
    end function redist_reset_operand_field_unchecked

    !> Collective: a new operand of the same shape, strides and memory, checked on every process.
    function redist_reset_operand(handle, operand) bind(C, name="redist_reset_operand") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: operand
      integer(c_int32_t) :: status
    end function redist_reset_operand

    !> A new operand, no checks (the caller guarantees it matches): the time-loop hot path.
    function redist_reset_operand_unchecked(handle, operand) bind(C, name="redist_reset_operand_unchecked") &
        result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: operand
      integer(c_int32_t) :: status
    end function redist_reset_operand_unchecked

    !> Drop redist's reference to the operand (set a new one before the next execute).
    function redist_release_operand(handle) bind(C, name="redist_release_operand") result(status)
      import :: redist_t, c_int32_t
      type(redist_t), value :: handle
      integer(c_int32_t) :: status
    end function redist_release_operand

    !> Collective. Any later use of the handle returns REDIST_ERROR_INVALID_STATE.
    function redist_free(handle) bind(C, name="redist_free") result(status)
      import :: redist_t, c_int32_t
      type(redist_t), value :: handle
      integer(c_int32_t) :: status
    end function redist_free

    !> The CUgraph executed on stream (device execution), for a child-graph node.
    function redist_graph(handle, stream, cuda_graph) bind(C, name="redist_graph") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: stream
      type(c_ptr), intent(out) :: cuda_graph
      integer(c_int32_t) :: status
    end function redist_graph

    !> Local: push the operand bound now into the copies of this exchange in the application's graph.
    function redist_update_graph_exec(handle, cuda_graph, cuda_graph_exec, ncopies) &
        bind(C, name="redist_update_graph_exec") result(status)
      import :: redist_t, c_int32_t, c_ptr
      type(redist_t), value :: handle
      type(c_ptr), value :: cuda_graph, cuda_graph_exec
      integer(c_int32_t), intent(out) :: ncopies
      integer(c_int32_t) :: status
    end function redist_update_graph_exec

    !> Local: the application's graphs holding copies of this exchange are destroyed (call before redist_free).
    function redist_release_captured(handle) bind(C, name="redist_release_captured") result(status)
      import :: redist_t, c_int32_t
      type(redist_t), value :: handle
      integer(c_int32_t) :: status
    end function redist_release_captured

    !> Static C text for a status (see redist_error_message for a Fortran string).
    function redist_get_error_string(status) bind(C, name="redist_get_error_string") result(str)
      import :: c_int32_t, c_ptr
      integer(c_int32_t), value :: status
      type(c_ptr) :: str
    end function redist_get_error_string

    !> C text of this thread's last failure (see redist_last_error_message for a Fortran string).
    function redist_get_last_error() bind(C, name="redist_get_last_error") result(str)
      import :: c_ptr
      type(c_ptr) :: str
    end function redist_get_last_error

    !> C text of the redist version, e.g. "0.1.0" (redist_string(redist_version()) in Fortran).
    function redist_version() bind(C, name="redist_version") result(str)
      import :: c_ptr
      type(c_ptr) :: str
    end function redist_version
  end interface

  interface
    function redist_c_strlen(s) bind(C, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function redist_c_strlen
  end interface

contains

  !> Collective. Create a handle with Fortran conventions: this process holds elements
  !> in_lbound(d) <= i(d) <= in_ubound(d) (1-based, inclusive, global indices) of a
  !> column-major array and receives out_lbound..out_ubound. An empty box has ubound = lbound - 1.
  !> operand: c_loc(array) (c_null_ptr for an empty box). in_strides (optional): element
  !> strides of a non-contiguous operand (a section with ghost cells, say); dense by default.
  !> The result is dense column-major, unless options (optional, from redist_options_init_f:
  !> transport, host method, blocking, order) say otherwise. global_shape (optional): the global
  !> array's extents, dimension 1 first, checked on every process against the bounding box of
  !> the input boxes (REDIST_ERROR_INVALID_VALUE on every process when they differ).
  function redist_create_f(handle, in_lbound, in_ubound, out_lbound, out_ubound, element_size, memory, operand, &
                           in_strides, options, global_shape) result(status)
    type(redist_t), intent(out) :: handle
    integer(c_int64_t), intent(in) :: in_lbound(:)
    integer(c_int64_t), intent(in) :: in_ubound(:)
    integer(c_int64_t), intent(in) :: out_lbound(:)
    integer(c_int64_t), intent(in) :: out_ubound(:)
    integer(c_int64_t), intent(in) :: element_size
    integer(c_int), intent(in) :: memory
    type(c_ptr), intent(in) :: operand
    integer(c_int64_t), intent(in), optional :: in_strides(:)
    type(redist_options_t), intent(in), optional :: options
    integer(c_int64_t), intent(in), optional :: global_shape(:)
    integer(c_int32_t) :: status
    type(redist_options_t) :: opts
    integer(c_int64_t), allocatable, target :: lo(:), hi(:), olo(:), ohi(:), st(:), gs(:)
    type(c_ptr) :: stp
    integer(c_int32_t) :: ndim

    call redist_c_arguments(in_lbound, in_ubound, out_lbound, out_ubound, options, ndim, lo, hi, olo, ohi, opts)
    call redist_global_shape(global_shape, ndim, gs, opts)
    stp = c_null_ptr
    if (present(in_strides)) then
      if (size(in_strides) /= ndim) ndim = -1_c_int32_t
      st = in_strides
      stp = c_loc(st)
    end if
    status = redist_create_ex(handle, ndim, lo, hi, stp, olo, ohi, element_size, memory, operand, opts)
  end function redist_create_f

  !> Collective. Several fields in ONE exchange, with redist_create_f's conventions (1-based
  !> inclusive bounds, column-major): operands(f) = c_loc of field f (c_null_ptr for an empty
  !> box), element_sizes(f) its bytes per element (field f's the same on every process).
  !> in_strides (optional): (ndim, nfields), column f the element strides of field f; every
  !> field dense by default. global_shape (optional): as redist_create_f's. Then
  !> redist_execute_fields, redist_reset_operands(_unchecked), redist_reset_operand_field_f; the
  !> one-array functions refuse the handle.
  function redist_create_fields_f(handle, in_lbound, in_ubound, out_lbound, out_ubound, element_sizes, memory, &
                                  operands, in_strides, options, global_shape) result(status)
    type(redist_t), intent(out) :: handle
    integer(c_int64_t), intent(in) :: in_lbound(:)
    integer(c_int64_t), intent(in) :: in_ubound(:)
    integer(c_int64_t), intent(in) :: out_lbound(:)
    integer(c_int64_t), intent(in) :: out_ubound(:)
    integer(c_int64_t), intent(in) :: element_sizes(:)
    integer(c_int), intent(in) :: memory
    type(c_ptr), intent(in) :: operands(:)
    integer(c_int64_t), intent(in), optional :: in_strides(:,:)
    type(redist_options_t), intent(in), optional :: options
    integer(c_int64_t), intent(in), optional :: global_shape(:)
    integer(c_int32_t) :: status
    type(redist_options_t) :: opts
    integer(c_int64_t), allocatable, target :: lo(:), hi(:), olo(:), ohi(:), st(:,:), gs(:)
    type(c_ptr) :: stp
    integer(c_int32_t) :: ndim, nfields

    call redist_c_arguments(in_lbound, in_ubound, out_lbound, out_ubound, options, ndim, lo, hi, olo, ohi, opts)
    call redist_global_shape(global_shape, ndim, gs, opts)
    ! field arrays of different sizes: nfields = -1 fails redist_create_fields on every process
    nfields = int(size(operands), c_int32_t)
    if (size(element_sizes) /= nfields) nfields = -1_c_int32_t
    stp = c_null_ptr
    if (present(in_strides)) then
      if (size(in_strides, 1) /= ndim) ndim = -1_c_int32_t
      if (size(in_strides, 2) /= nfields) nfields = -1_c_int32_t
      st = in_strides
      stp = c_loc(st)
    end if
    status = redist_create_fields(handle, nfields, ndim, lo, hi, stp, olo, ohi, element_sizes, memory, operands, &
                                  opts)
  end function redist_create_fields_f

  !> A new operand for field `field` (1-based) only. Collective, checked on every process
  !> (redist_reset_operand_field); unchecked = .true. (optional): no checks but the field's
  !> range, local (redist_reset_operand_field_unchecked, the time-loop hot path).
  function redist_reset_operand_field_f(handle, field, operand, unchecked) result(status)
    type(redist_t), intent(in) :: handle
    integer, intent(in) :: field
    type(c_ptr), intent(in) :: operand
    logical, intent(in), optional :: unchecked
    integer(c_int32_t) :: status
    logical :: fast
    fast = .false.
    if (present(unchecked)) fast = unchecked
    if (fast) then
      status = redist_reset_operand_field_unchecked(handle, int(field - 1, c_int32_t), operand)
    else
      status = redist_reset_operand_field(handle, int(field - 1, c_int32_t), operand)
    end if
  end function redist_reset_operand_field_f

  !> What redist_create_f and redist_create_fields_f pass to C: 0-based half-open boxes from
  !> 1-based inclusive bounds (ndim = -1 when the bound arrays differ in size: the collective is
  !> still called, and fails on every process, where a local return would leave the others
  !> waiting), and the options (redist_options_init_f's when absent).
  subroutine redist_c_arguments(in_lbound, in_ubound, out_lbound, out_ubound, options, ndim, lo, hi, olo, ohi, opts)
    integer(c_int64_t), intent(in) :: in_lbound(:)
    integer(c_int64_t), intent(in) :: in_ubound(:)
    integer(c_int64_t), intent(in) :: out_lbound(:)
    integer(c_int64_t), intent(in) :: out_ubound(:)
    type(redist_options_t), intent(in), optional :: options
    integer(c_int32_t), intent(out) :: ndim
    integer(c_int64_t), allocatable, intent(out) :: lo(:), hi(:), olo(:), ohi(:)
    type(redist_options_t), intent(out) :: opts

    if (present(options)) then
      opts = options
    else
      call redist_options_init_f(opts)
    end if
    ndim = int(size(in_lbound), c_int32_t)
    if (size(in_ubound) /= ndim .or. size(out_lbound) /= ndim .or. size(out_ubound) /= ndim) then
      ndim = -1_c_int32_t
      allocate(lo(1), hi(1), olo(1), ohi(1))
      lo = 0
      hi = 0
      olo = 0
      ohi = 0
      return
    end if
    lo = in_lbound - 1_c_int64_t   ! 1-based inclusive -> 0-based half-open
    hi = in_ubound
    olo = out_lbound - 1_c_int64_t
    ohi = out_ubound
  end subroutine redist_c_arguments

  !> opts%global_shape from the optional global_shape argument (copied into gs, which the caller
  !> keeps until its C call; ndim = -1 when its size is not ndim, which fails on every process).
  subroutine redist_global_shape(global_shape, ndim, gs, opts)
    integer(c_int64_t), intent(in), optional :: global_shape(:)
    integer(c_int32_t), intent(inout) :: ndim
    integer(c_int64_t), allocatable, target, intent(inout) :: gs(:)
    type(redist_options_t), intent(inout) :: opts

    if (.not. present(global_shape)) return
    if (size(global_shape) /= ndim) ndim = -1_c_int32_t
    gs = global_shape
    opts%global_shape = c_loc(gs)
  end subroutine redist_global_shape

  !> Default options (column-major result, as Fortran arrays), with struct_size and version set.
  subroutine redist_options_init_f(options)
    type(redist_options_t), intent(out) :: options
    options%struct_size = c_sizeof(options)
    options%version = REDIST_OPTIONS_VERSION
    options%order = REDIST_ORDER_F
    options%transport = REDIST_TRANSPORT_AUTO
    options%host_method = REDIST_HOST_METHOD_AUTO
    options%blocking = 0_c_int32_t
    options%signal = REDIST_SIGNAL_EPOCH
    options%result_ndim = 0_c_int32_t
    options%result_order = 0_c_int32_t
    options%allow_overlap = 0_c_int32_t
    options%global_shape = c_null_ptr
    options%tune = REDIST_TUNE_ESTIMATE
    options%tune_out = 0_c_int32_t
    options%tune_budget = 0.0_c_double
  end subroutine redist_options_init_f

  !> redist_export_wisdom with a Fortran string (trailing blanks dropped).
  function redist_export_wisdom_f(path, entries) result(status)
    character(len=*), intent(in) :: path
    integer(c_int32_t), intent(out) :: entries
    integer(c_int32_t) :: status
    status = redist_export_wisdom(trim(path) // c_null_char, entries)
  end function redist_export_wisdom_f

  !> redist_import_wisdom with a Fortran string (trailing blanks dropped).
  function redist_import_wisdom_f(path, entries) result(status)
    character(len=*), intent(in) :: path
    integer(c_int32_t), intent(out) :: entries
    integer(c_int32_t) :: status
    status = redist_import_wisdom(trim(path) // c_null_char, entries)
  end function redist_import_wisdom_f

  !> A permuted result: `axes` lists the array's dimensions (1-based) from fastest- to
  !> slowest-varying in memory, as Fortran users think of column-major order: (1, 2, 3) is the
  !> usual Fortran layout, (2, 1, 3) makes dimension 2 contiguous. A wrong list (not a
  !> permutation of 1..ndim, empty, or longer than 16) is REDIST_ERROR_INVALID_VALUE from
  !> redist_create_f, on every process.
  subroutine redist_options_result_order_f(options, axes)
    type(redist_options_t), intent(inout) :: options
    integer, intent(in) :: axes(:)
    integer :: n, i

    n = size(axes)
    options%result_order = 0_c_int32_t
    if (n == 0 .or. n > 16) then   ! refused by redist_create: result_ndim must be 1..16 (or 0: none)
      options%result_ndim = -1_c_int32_t
      return
    end if
    options%result_ndim = int(n, c_int32_t)
    do i = 1, n   ! C order: 0-based, slowest first
      options%result_order(i) = int(axes(n + 1 - i) - 1, c_int32_t)
    end do
  end subroutine redist_options_result_order_f

  !> A C string (const char *) as a Fortran string ("" for a null pointer).
  function redist_string(cstr) result(str)
    type(c_ptr), intent(in) :: cstr
    character(len=:), allocatable :: str
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i

    if (.not. c_associated(cstr)) then
      str = ""
      return
    end if
    n = int(redist_c_strlen(cstr))
    call c_f_pointer(cstr, chars, [n])
    allocate(character(len=n) :: str)
    do i = 1, n
      str(i:i) = chars(i)
    end do
  end function redist_string

  !> The detailed message of this thread's last failure, as a Fortran string.
  function redist_last_error_message() result(str)
    character(len=:), allocatable :: str
    str = redist_string(redist_get_last_error())
  end function redist_last_error_message

  !> The static description of a status, as a Fortran string.
  function redist_error_message(status) result(str)
    integer(c_int32_t), intent(in) :: status
    character(len=:), allocatable :: str
    str = redist_string(redist_get_error_string(status))
  end function redist_error_message

end module redist
