"""Inter-rater agreement at a study's size: 100,000 items × 4 raters, labels as strings, 5 % gaps.

Times what the Labelling view and `workbench labels agreement` compute for such a table — Fleiss' κ
and Krippendorff's α (`agreement`), and Cohen's κ of the first two raters — against:

- the **floor**: numpy turning the same rows into an object array, one pass over every entry in C
  with no hashing; any code that takes the ratings as Python lists reads each entry at least once;
- the references the tests check the values against (statsmodels' Fleiss' κ, `krippendorff`'s α),
  given the table already encoded as integer codes, as they need it.

The tests check the values at this size (tests/core/test_labeling_agreement.py); how long they take
depends on the machine, so it is measured here (a test held it under 1.5 s until 2026-12-07).

    .venv/bin/python benchmarks/bench_agreement.py [--items 100000] [--raters 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--raters", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from workbench.core.labeling.agreement import agreement, cohen_kappa

    rng = np.random.default_rng(0)
    names = np.array(["valid", "invalid", "unsure"], dtype=object)
    table = names[rng.integers(0, 3, (args.items, args.raters))]
    table[rng.random(table.shape) < 0.05] = None
    rows = table.tolist()  # as the label store hands them over: lists of str or None
    pairs = [row[:2] for row in rows]

    timings = {
        "floor: numpy object array of the rows": best_of(args.repeats, lambda: np.array(rows, dtype=object)),
        "agreement (Fleiss' κ + Krippendorff's α)": best_of(args.repeats, lambda: agreement(rows)),
        "cohen_kappa (first two raters)": best_of(args.repeats, lambda: cohen_kappa(pairs)),
    }
    timings["both, as the test ran them"] = \
        timings["agreement (Fleiss' κ + Krippendorff's α)"] + timings["cohen_kappa (first two raters)"]

    codes = np.full(table.shape, np.nan)
    for code, name in enumerate(names):
        codes[table == name] = code
    try:
        import krippendorff
        from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

        complete = codes[~np.isnan(codes).any(axis=1)].astype(int)
        timings["reference: statsmodels Fleiss' κ (codes given)"] = best_of(
            args.repeats, lambda: fleiss_kappa(aggregate_raters(complete)[0]))
        timings["reference: krippendorff α (codes given)"] = best_of(
            args.repeats, lambda: krippendorff.alpha(reliability_data=codes.T, level_of_measurement="nominal"))
    except ImportError:
        print("(statsmodels or krippendorff missing: the references are left out; pip install -e '.[test]')")

    floor = timings["floor: numpy object array of the rows"]
    print(f"Agreement over {args.items:,} items × {args.raters} raters, 5 % gaps (best of {args.repeats})")
    print(f"{'what':<50} {'time s':>8} {'× floor':>8}")
    for name, seconds in timings.items():
        print(f"{name:<50} {seconds:>8.3f} {seconds / floor:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
