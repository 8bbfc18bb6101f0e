# SPDX-License-Identifier: Apache-2.0
"""Finding and running ``mpiexec`` (used by the CLI demo and by the test-suite)."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys

__all__ = ["find_mpiexec", "mpiexec_command", "under_mpi_launcher", "run_mpi"]


@functools.cache
def find_mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich wheel puts it there), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


@functools.cache
def _is_open_mpi(exe: str) -> bool:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in out or "OpenRTE" in out or "open-mpi" in out.lower()


def mpiexec_command(nprocs: int) -> list[str]:
    """``[mpiexec, -n, N, ...flags]`` for this machine's MPI (Open MPI needs extra flags as root)."""
    exe = find_mpiexec()
    if exe is None:
        raise FileNotFoundError("mpiexec not found: install the 'mpich' wheel (pip install mpich) or an MPI")
    cmd = [exe, "-n", str(nprocs)]
    if _is_open_mpi(exe):
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd


def under_mpi_launcher() -> bool:
    """True when this process was started by an MPI launcher (mpiexec/mpirun/srun)."""
    keys = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_ID")
    return any(k in os.environ for k in keys)


def run_mpi(nprocs: int, args: list[str], *, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs <args>``; kill the whole job if it outlives ``timeout`` seconds.

    Returns the completed process (stdout and stderr merged, as text). On timeout, returncode
    is -9 and the output so far ends with a line saying so.
    """
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(
        mpiexec_command(nprocs) + list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out = (out or "") + f"\n[redist] mpiexec -n {nprocs} killed after {timeout:.0f} s timeout\n"
        return subprocess.CompletedProcess(proc.args, -9, out, None)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, None)
