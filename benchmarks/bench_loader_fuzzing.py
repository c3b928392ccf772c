"""A longer run of the loader fuzzing test: many more generated IDX, NPZ, HDF5 and image files.

Each generated file must be read correctly or refused with a `WorkbenchError`; the run stops at the
first that is not, and says which. Prints how many files of each kind were tried and how many were
read or refused.

    .venv/bin/python benchmarks/bench_loader_fuzzing.py [--examples 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "core")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=2000, help="generated files per kind (default 2000)")
    args = parser.parse_args()
    os.environ["WORKBENCH_FUZZ_EXAMPLES"] = str(args.examples)
    import test_loader_fuzzing as fuzzing

    print(f"{'kind':<14} {'files':>7} {'read':>7} {'refused':>8} {'seconds':>8}")
    for kind in ("idx_folders", "npz_files", "hdf5_files", "image_folders"):
        before = dict(fuzzing.OUTCOMES)
        started = time.perf_counter()
        getattr(fuzzing, f"test_{kind}")()
        read = fuzzing.OUTCOMES["read"] - before["read"]
        refused = fuzzing.OUTCOMES["refused"] - before["refused"]
        print(f"{kind:<14} {read + refused:>7} {read:>7} {refused:>8} {time.perf_counter() - started:>8.1f}")
    print("Every generated file was read correctly or refused with a WorkbenchError.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
