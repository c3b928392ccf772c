"""A colour dataset a user could bring, made offline from Fashion-MNIST: "colour Fashion-MNIST", 3×32×32.

Each garment is painted in its own colour on its own dark background (both drawn per image from a seeded
generator: a saturated garment colour, a background at most 40 % bright), padded from 28 to 32 pixels, and
stored as an NPZ the workbench reads (`x_train`, `y_train`, `x_test`, `y_test`, uint8 N×3×32×32). The class is
the garment's shape, as in Fashion-MNIST; colour carries no class, so a classifier and a generator must learn
shapes in colour. No real colour set of this size ships offline (spec: only foolbox's 20 CIFAR images).

Run: `python benchmarks/colour_fashion.py OUT.npz [--train 60000] [--test 10000]`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def colourise(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 (N, 28, 28) grey → uint8 (N, 3, 32, 32): garment colour × ink + background × (1 − ink), padded."""
    n = len(images)
    ink = np.pad(images.astype(np.float32) / 255.0, ((0, 0), (2, 2), (2, 2)))[:, None]
    hue = rng.random(n)
    garment = np.stack([np.clip(np.abs(((hue * 6 + shift) % 6) - 3) - 1, 0, 1) for shift in (0, 4, 2)], axis=1)
    garment = 0.35 + 0.65 * garment  # saturated, never black
    background = rng.random((n, 3)) * 0.4
    rgb = ink * garment[:, :, None, None] + (1 - ink) * background[:, :, None, None]
    return np.clip(np.rint(rgb * 255), 0, 255).astype(np.uint8)


def make(out: Path, train: int = 60_000, test: int = 10_000, seed: int = 0) -> Path:
    from workbench.core.data.registry import load_dataset

    fashion = load_dataset("fashion-mnist")
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in (("train", train), ("test", test)):
        part = fashion.split(split)
        pick = np.arange(min(count, len(part)))
        grey = np.rint(part.tensor(pick).numpy()[:, 0] * 255).astype(np.uint8)
        arrays[f"x_{split}"] = colourise(grey, rng)
        arrays[f"y_{split}"] = np.asarray(part.labels)[pick].astype(np.int64)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=60_000)
    parser.add_argument("--test", type=int, default=10_000)
    args = parser.parse_args()
    print(make(args.out, args.train, args.test))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
