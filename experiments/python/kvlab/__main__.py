"""python -m kvlab COMMAND: the Python side's commands.

    python -m kvlab export FILE.h5 [...] --csv DIR | --parquet DIR     (see kvlab.export)
    python -m kvlab info                                               (what this kvlab can do)
"""
import sys


def _info() -> int:
    import kvlab
    print(f"kvlab {kvlab.__version__} at {kvlab.__path__[0]}")
    try:
        from kvlab._native import native
        m = native()
        print(f"extension: {m.__file__} (CUDA: {'yes' if m.has_cuda else 'no'})")
        if m.has_cuda:
            from kvlab import ops
            n = ops.device_count()
            print(f"CUDA devices: {n}")
            for v in ops.decode_versions():
                print(f"  decode {v.id} {v.name}: {v.summary}")
            print("  decode auto: the version and split gpu::choose_decode picks per shape (ops.choose_decode)")
            for v in ops.prefill_versions():
                print(f"  prefill {v.id} {v.name}: {v.summary}")
    except ImportError as e:
        print(f"extension: not importable ({e})")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "export":
        from kvlab.export import main as export_main
        return export_main(rest)
    if cmd == "info":
        return _info()
    print(f"python -m kvlab: unknown command {cmd!r} (export, info)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
