# SPDX-License-Identifier: Apache-2.0
"""The bad-input matrix of the C ABI (tests/cabi/checks/bad_input.c): each case in its own mpiexec, at
P=2 and P=3, under a watchdog. The expected outcome is written next to each case: the status on
every rank (and a pattern its message must match, naming the rank at fault), or success with
the right data. ``reset_operand_unchecked`` is local by design: only the rank at fault fails.
"""

from __future__ import annotations

import re

import pytest
from redist.engine.errors import STATUS

import helpers
from helpers import clean_env, mpi, run

pytestmark = [pytest.mark.cabi, pytest.mark.mpi]

IV, IS, NI, NS, CE, OK = (STATUS[k] for k in ("INVALID_VALUE", "INVALID_STATE", "NOT_INITIALIZED", "NOT_SUPPORTED",
                                              "COMMUNICATION", "SUCCESS"))
LAST = "rank {last}"

#: case -> (status on every rank, message pattern or None, data expected "ok" or None)
CASES = {
    "create_null_handle_last": (IV, rf"{LAST}: handle .* is NULL", None),
    "create_ndim_zero_last": (IV, rf"{LAST}: ndim must be in 1..64, got 0", None),
    "create_ndim_huge_last": (IV, rf"{LAST}: ndim must be in 1..64, got 100", None),
    "create_lower_null_last": (IV, rf"{LAST}: in_lower is NULL", None),
    "create_item_size_zero_last": (IV, rf"{LAST}: element_size must be positive, got 0", None),
    "create_item_size_negative_last": (IV, rf"{LAST}: element_size must be positive, got -8", None),
    "create_operand_null_last": (IV, rf"{LAST}: operand is NULL but the input box holds", None),
    "create_order_garbage_last": (IV, rf"{LAST}: order must be REDIST_ORDER_C", None),
    "create_memory_garbage_last": (IV, rf"{LAST}: memory must be REDIST_MEMORY_HOST", None),
    "create_order_differs_last": (IV, r"order and memory must be the same on every rank", None),
    "create_box_negative_last": (IV, rf"{LAST} input box .* negative coordinate", None),
    "create_box_overlap_last": (IV, r"overlaps rank {last} box", None),
    "create_ex_struct_size_last": (IV, rf"{LAST}: options->struct_size is \d+", None),
    "create_ex_version_last": (IV, rf"{LAST}: options->version is 99; this library knows versions 1 to \d", None),
    "create_ex_v1_struct_ok": (OK, None, "ok"),
    "create_ex_global_shape_last": (
        IV, rf"global_shape differs between ranks: rank 0 passes \(9, 7\), but {LAST} passes \(9, 8\)", None),
    "create_ex_result_order_last": (IV, rf"{LAST}: options->result_order \[0, 0\] is not a permutation", None),
    "create_ex_result_ndim_last": (IV, rf"{LAST}: options->result_ndim is 3 but ndim is 2", None),
    "create_ex_allow_overlap_garbage_last": (IV, rf"{LAST}: options->allow_overlap must be 0 or 1, got 5", None),
    "create_ex_allow_overlap_differs_last": (IV, r"inconsistent options across ranks.*allow_overlap", None),
    "create_ex_transport_garbage_last": (IV, rf"{LAST}: options->transport must be", None),
    "create_ex_signal_last": (IV, rf"{LAST}: options->signal must be a redist_signal_t", None),
    "create_ex_null_options_ok": (OK, None, "ok"),
    "create_ex_tune_garbage_last": (IV, rf"{LAST}: options->tune must be a redist_tune_t \(0..2\), got 3", None),
    "create_ex_tune_measure_ok": (OK, None, "ok"),
    "create_ex_v2_struct_ok": (OK, None, "ok"),
    "wisdom_import_null_last": (IV, rf"redist_import_wisdom: .*{LAST}: a wisdom path must not be empty", None),
    "wisdom_export_null_last": (IV, rf"redist_export_wisdom: .*{LAST}: a wisdom path must not be empty", None),
    "wisdom_import_missing_ok": (OK, None, "ok"),
    "wisdom_forget_ok": (OK, None, "ok"),
    "create_device_memory_without_gpu": (NI, r"CUDA execution needs redist initialised with a GPU", None),
    "execute_garbage_handle": (IV, r"0xdeadbeef is not a redist_t handle", None),
    "execute_null_handle": (IV, r"the redist_t handle is NULL", None),
    "execute_after_free": (IS, r"has been freed", None),
    "execute_before_plan": (IS, r"before plan\(\) has been called", None),
    "execute_after_release_last": (IS, rf"{LAST}: Execution cannot be performed after the operand has been released",
                                   None),
    "out_on_some_ranks_ok": (OK, None, "ok"),
    "out_null_on_an_empty_box_ok": (OK, None, "ok"),
    "out_aliases_operand_last": (IV, rf"{LAST}: execute\(out=...\): out= overlaps the operand", None),
    "reset_operand_null_last": (IV, rf"{LAST}: the operand is NULL but this rank's input box holds", None),
    "reset_operand_unchecked_null_last": ("local", r"the operand is NULL", None),
    "free_twice": (IS, r"has been freed", None),
    "negative_strides_ok": (OK, None, "ok"),
    "zero_strides_input_ok": (OK, None, "ok"),
    "initialize_twice": (IS, r"already initialized", None),
    "comm_rank_null_ok": (OK, None, None),
    "symmetric_null_ptr_last": (IV, rf"redist_allocate_symmetric_memory: .*{LAST}: ptr is NULL", None),
    "symmetric_negative_size_last": (IV, rf"{LAST}: nbytes must be non-negative, got -8", None),
    "symmetric_free_private_last": (IV, rf"{LAST}: the memory at 0x[0-9a-f]+ was not allocated by "
                                        "redist_allocate_symmetric_memory", "ok"),
    "symmetric_free_twice": (IV, r"was not allocated by redist_allocate_symmetric_memory \(or was freed already\)",
                             None),
    "symmetric_out_ok": (OK, None, "ok"),
    # an out= mapped read-only behind redist's back, on a rank that keeps part of its own data: the kernel refuses
    # its local part too (no SIGSEGV), in Python and replayed (issue #49)
    "protected_out_with_a_local_part_last": (CE, r"cross-memory copies into rank\(s\) {last} failed \(Bad address\)",
                                             "ok"),
    "graph_on_host": (NS, r"graph\(\) is only available for CUDA execution", None),
    "update_graph_exec_on_host": (NS, r"update_captured\(\) is only available for CUDA execution", "ok"),
    "update_graph_exec_null": (IV, r"cuda_graph and cuda_graph_exec must not be NULL", None),
    "release_captured_on_host_ok": (OK, None, None),
    # fused fields (redist_create_fields): a double and a float field in one exchange
    "fields_ok": (OK, None, "ok"),
    "fields_out_some_ranks_ok": (OK, None, "ok"),
    "fields_nfields_differs_last": (IV, rf"nfields must be the same on every rank: rank 0 has 2, but {LAST} has 3",
                                    None),
    "fields_nfields_zero_last": (IV, rf"{LAST}: nfields must be in 1\.\.1024, got 0", None),
    "fields_nfields_negative_last": (IV, rf"{LAST}: nfields must be in 1\.\.1024, got -2", None),
    "fields_create_operand_null_last": (IV, rf"{LAST}: field 1: operands\[1\] is NULL but the input box holds", None),
    "fields_operands_null_last": (IV, rf"{LAST}: operands is NULL but the input box holds", None),
    "fields_item_size_differs_last": (
        IV, rf"field 1: element_sizes\[1\] must be the same on every rank: rank 0 has 4, but {LAST} has 8", None),
    "fields_item_size_zero_last": (IV, rf"{LAST}: field 1: element_sizes\[1\] must be positive, got 0", None),
    "fields_sizes_null_last": (IV, rf"{LAST}: element_sizes is NULL", None),
    "fields_reset_operands_null_last": (
        IV, rf"redist_reset_operands: .*{LAST}: field 1: the operand is NULL but this rank's input box holds", None),
    "fields_reset_operands_unchecked_null_last": ("local", r"field 1: the operand is NULL", None),
    "fields_reset_field_out_of_range_last": (IV, rf"{LAST}: field must be in 0..1 \(0-based\), got 2", None),
    "fields_reset_field_null_last": (IV, rf"{LAST}: field 1: the operand is NULL", None),
    "fields_after_release_last": (
        IS, rf"{LAST}: Execution cannot be performed after the operand has been released", None),
    "fields_out_aliases_operand_last": (IV, rf"{LAST}: execute\(out=...\): field 1: out= overlaps field 0's operand",
                                        None),
    # a handle of the other kind: a property of the handle (made collectively), so every rank
    # passes it and gets the same local INVALID_VALUE, before any communication (as a bad handle)
    "fields_one_array_function": (IV, r"redist_execute: .*handle \d+ moves 2 fields \(made by redist_create_fields\)",
                                  None),
    "execute_fields_one_array_handle": (IV, r"redist_execute_fields: .*handle \d+ moves one array", None),
    "reset_operands_one_array_handle": (IV, r"redist_reset_operands: .*handle \d+ moves one array", None),
}
#: cases run on one process, without mpiexec (before redist_initialize)
SINGLE = {
    "plan_before_initialize": (IV, r"not a redist_t handle|call redist_initialize", None),
    "initialize_bad_device": (IV, r"device_id must be a CUDA device ordinal", None),
}


@pytest.fixture(scope="module")
def bad_input(cabi, tmp_path_factory):
    return helpers.compile_c(helpers.CABI_CHECKS / "bad_input.c", tmp_path_factory.mktemp("cabi-bad") / "bad_input", cabi)


def outcomes(text: str) -> dict[int, tuple[int, str, str]]:
    status = {int(r): (int(s), m) for r, s, m in re.findall(r"^rank (\d+): status (-?\d+): (.*)$", text, re.M)}
    data = {int(r): d for r, d in re.findall(r"^rank (\d+): data (\S+)$", text, re.M)}
    return {r: (s, m, data.get(r, "?")) for r, (s, m) in status.items()}


def check(text: str, nprocs: int, want_status, pattern, want_data) -> None:
    got = outcomes(text)
    assert sorted(got) == list(range(nprocs)), f"not every rank reported (a crash?):\n{text[-4000:]}"
    last = nprocs - 1
    pat = None if pattern is None else pattern.replace("{last}", str(last))
    for r, (status, msg, data) in got.items():
        expect = want_status
        if want_status == "local":  # only the rank at fault fails
            expect = IV if r == last else OK
        assert status == expect, f"rank {r}: status {status}, expected {expect}: {msg}\n{text[-3000:]}"
        if status != OK and pat is not None:
            assert re.search(pat, msg), f"rank {r}: {msg!r} does not match {pat!r}"
        if want_data is not None:
            assert data == want_data, f"rank {r}: data {data}"
    if want_status not in ("local", OK):
        assert len({m for _, m, _ in got.values()}) == 1, f"ranks report different errors: {got}"


@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_c(bad_input, name, nprocs):
    res = mpi(nprocs, bad_input, name, timeout=90)
    assert res.returncode == 0, f"rc={res.returncode} (a hang is killed at 90 s):\n{res.stdout[-4000:]}"
    check(res.stdout, nprocs, *CASES[name])


#: cases whose handle first runs good calls (BAD_INPUT_WARM): the good ranks replay theirs in C, so a
#: rank at fault or a rank that calls differently meets a compiled replay (cabi/redist_replay.c)
AFTER_REPLAYS = sorted(n for n in CASES if n.startswith(("execute_after", "out_", "reset_operand", "free_twice",
                                                          "fields_reset", "fields_after", "fields_out",
                                                          "fields_ok", "execute_fields_one", "fields_one")))


@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("name", AFTER_REPLAYS)
def test_bad_input_c_after_replays(bad_input, name, nprocs):
    """The same outcome as :func:`test_bad_input_c` when the good ranks' calls are compiled replays."""
    res = mpi(nprocs, bad_input, name, timeout=90, env=clean_env(BAD_INPUT_WARM="1"))
    assert res.returncode == 0, f"rc={res.returncode} (a hang is killed at 90 s):\n{res.stdout[-4000:]}"
    check(res.stdout, nprocs, *CASES[name])


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_bad_input_c_single(bad_input, name):
    res = run([bad_input, name], env=clean_env())
    assert res.returncode == 0, res.stdout + res.stderr
    check(res.stdout, 1, *SINGLE[name])
