# SPDX-License-Identifier: Apache-2.0
"""``python -m redist.cabi build|flags``: build the C/Fortran library, print compiler flags.

Examples::

    python -m redist.cabi build --out DIR      # DIR/libredist.so, redist.h, redist.f90 (+ redist.mod, libredist_f.a)
    python -m redist.cabi flags --out DIR      # all flags, one kind per line
    mpicc app.c $(python -m redist.cabi flags --out DIR --cflags --libs) -o app
    gfortran app.f90 $(python -m redist.cabi flags --out DIR --fflags --flibs) -o app
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._build import build, default_dir, flags, fortran_built


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m redist.cabi", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build libredist.so and install redist.h, redist.f90 next to it")
    b.add_argument("--out", default=None, help=f"output directory (default: {default_dir()})")
    g = b.add_mutually_exclusive_group()
    g.add_argument("--fc", default=None, help="Fortran compiler for redist.mod / libredist_f.a (default: $FC or gfortran)")
    g.add_argument("--no-fortran", action="store_true", help="do not compile the Fortran module")
    b.add_argument("-v", "--verbose", action="store_true")
    f = sub.add_parser("flags", help="print compile and link flags for C and Fortran")
    f.add_argument("--out", default=None, help=f"the build directory (default: {default_dir()})")
    for key, what in (("cflags", "C compile flags"), ("libs", "C link flags"), ("fflags", "Fortran compile flags"),
                      ("flibs", "Fortran link flags")):
        f.add_argument(f"--{key}", action="store_true", help=f"print only the {what} (combinable)")
    a = p.parse_args(argv)
    if a.cmd == "build":
        written = build(a.out, fortran=False if a.no_fortran else (a.fc or True), verbose=a.verbose)
        for key, path in written.items():
            print(f"{key:15s} {path}")
        return 0
    try:
        fl = flags(a.out)
    except FileNotFoundError as e:
        p.exit(2, f"{p.prog} flags: error: {e}\n")
    fortran = fortran_built(fl["dir"])
    if not fortran and (a.fflags or a.flibs):
        p.exit(2, f"{p.prog} flags: error: {fl['dir']} has no Fortran module (redist.mod, libredist_f.a): "
                  f"rebuild with a Fortran compiler (python -m redist.cabi build --out {fl['dir']} --fc FC)\n")
    picked = [fl[k] for k in ("cflags", "libs", "fflags", "flibs") if getattr(a, k)]
    if picked:
        print(" ".join(picked))
        return 0
    print(f"# redist C ABI in {fl['dir']}")
    print(f"C compile:        {fl['cflags']}")
    print(f"C link:           {fl['libs']}")
    if fortran:
        print(f"Fortran compile:  {fl['fflags']}")
        print(f"Fortran link:     {fl['flibs']}")
    else:
        print("Fortran:          not built (--no-fortran, or no Fortran compiler at build time: build --fc FC)")
    print("# Fortran with another compiler: add DIR/redist.f90 to your sources and link with the C link flags.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
