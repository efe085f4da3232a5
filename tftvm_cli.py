"""The `tftvm` command's entry point, outside the package so that it runs before TensorFlow
is imported (importing tftvm imports TF).

The command prints for a person, and TF's start-up notices are noise there: the CPU
feature guard (which TF_CPP_MIN_LOG_LEVEL=1 silences) and the oneDNN notice, which TF 2.21
logs through absl before any log level applies, once per library that carries it. So the
command sets TF_CPP_MIN_LOG_LEVEL=1 unless the user set it, and while TF loads it holds back
what is written to stderr and passes on every line but those notices. With a log level of 0
(the user asked for TF's INFO lines) nothing is held back.
"""
import contextlib
import os
import sys
import tempfile

START_UP_NOTICES = ("All log messages before absl::InitializeLog() is called",
                    "oneDNN custom operations are on",
                    "This TensorFlow binary is optimized to use available CPU instructions",
                    "To enable the following instructions:")  # fmt: skip


@contextlib.contextmanager
def _without_start_up_notices():
    """stderr (the file descriptor, where TF's C++ logs go) held back during the block, then
    written out without the lines that hold a start-up notice."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not any(n in line for n in START_UP_NOTICES)))
            sys.stderr.flush()


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    quiet = os.environ["TF_CPP_MIN_LOG_LEVEL"] != "0"
    with _without_start_up_notices() if quiet else contextlib.nullcontext():
        from tftvm.cli import main as run
    return run()
