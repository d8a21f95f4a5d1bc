"""The `anyep` command of the pip package (pip install ./python; console script anyep.cli:main).

    anyep bench ll [args]   the LL benchmark: anyep/bench/bench_ll.py run with this interpreter
    anyep bench ht [args]   the HT benchmark: anyep/bench/bench_ht.py
    anyep version           the package's version
    anyep <other command>   handed to the C++ `anyep` program (info, bench proxy|transport, ...)

The benchmark scripts ship inside the package (setup.py copies them from the repository's bench/);
in a source checkout without them, the checkout's bench/ scripts run. Their arguments pass through
unchanged (`anyep bench ll --help` lists them); they import this package, and without torch or a
GPU they exit 77 saying which is missing. The C++ program (cli/ of the repository; `cmake
--install` puts it in <prefix>/bin together with its own copy of the scripts) is not part of the
pip package: other commands run the first `anyep` executable on PATH that is a compiled program,
and exit 77 naming what to install when there is none. Exit status: the command's."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Benchmark -> (the script in the package, the same script in a source checkout).
SCRIPTS = {"ll": ("bench/bench_ll.py", "../../bench/ll/bench_ll.py"),
           "ht": ("bench/bench_ht.py", "../../bench/ht/bench_ht.py")}
EXIT_USAGE, EXIT_CANNOT_RUN = 2, 77

USAGE = """usage: anyep <command> [args]

  bench ll [args]   LL dispatch/combine benchmark with its NCCL baseline (python3 with torch, a GPU per rank)
  bench ht [args]   HT dispatch/combine benchmark with its NCCL baseline (python3 with torch, a GPU)
  version           this package's version
  anything else     info, bench proxy|transport, ...: run by the C++ anyep program on PATH (cmake --install)

`anyep bench ll --help` lists the benchmark's own options."""


def bench_script(name):
    """The script of benchmark `name` ("ll" or "ht").

    Arguments:
        name: the benchmark.

    Returns:
        path: the packaged script, else the source checkout's; None when neither exists.
    """
    for rel in SCRIPTS[name]:
        path = os.path.normpath(os.path.join(HERE, rel))
        if os.path.isfile(path):
            return path
    return None


def native_program():
    """The C++ `anyep` on PATH: the first executable named anyep that is an ELF program (this
    command is a Python script, so it never finds itself).

    Returns:
        path: its path, or None when there is none.
    """
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", "anyep")
        try:
            with open(path, "rb") as f:
                elf = f.read(4) == b"\x7fELF"
        except OSError:
            continue
        if elf and os.access(path, os.X_OK):
            return path
    return None


def main(argv=None):
    """Runs one command.

    Arguments:
        argv: the arguments after the program name (default: sys.argv[1:]).

    Returns:
        status: the exit status (when the command is not handed over to another program).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else EXIT_USAGE
    if args[0] == "version":
        from . import __version__
        print(f"anyep {__version__}")
        return 0
    if args[0] == "bench" and len(args) >= 2 and args[1] in SCRIPTS:
        script = bench_script(args[1])
        if script is None:
            print(f"anyep bench {args[1]}: cannot run here: its script is not in the package "
                  f"({os.path.join(HERE, SCRIPTS[args[1]][0])}): reinstall with pip install ./python", file=sys.stderr)
            return EXIT_CANNOT_RUN
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, script] + args[2:])
    native = native_program()
    if native is None:
        print(f"anyep {' '.join(args[:2])}: cannot run here: this command belongs to the C++ anyep program, and "
              "no anyep program is on PATH (build the repository with CMake and cmake --install it); "
              "this package runs: bench ll, bench ht, version", file=sys.stderr)
        return EXIT_CANNOT_RUN
    sys.stdout.flush()
    os.execv(native, [native] + args)


if __name__ == "__main__":
    sys.exit(main())
