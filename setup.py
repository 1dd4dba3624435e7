"""Builds shmwheel's native core, ``shmwheel._native``, from shmwheel/native/*.c with the
system C compiler. Everything else is in pyproject.toml. No prebuilt binary is fetched:
with no working C compiler the install stops with a message that says what to install."""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildNative(build_ext):
    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # compile the C files on every core (nproc), as -j would
            self.parallel = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # CompileError, LinkError, a missing gcc/cc: say what to do
            sys.stderr.write(
                "\nshmwheel: building the native core (shmwheel/native/*.c) failed: "
                f"{e}\nshmwheel needs a C11 compiler and the Python headers to install, e.g. "
                "'apt-get install gcc python3-dev' (Debian/Ubuntu) or "
                "'dnf install gcc python3-devel' (Fedora).\n\n"
            )
            raise


setup(
    ext_modules=[
        Extension(
            "shmwheel._native",
            sources=sorted(glob.glob("shmwheel/native/*.c")),
            depends=sorted(glob.glob("shmwheel/native/*.h")),
            extra_compile_args=[
                "-std=c11",
                "-O2",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                "-fno-strict-aliasing",
            ],
        )
    ],
    cmdclass={"build_ext": BuildNative},
)
