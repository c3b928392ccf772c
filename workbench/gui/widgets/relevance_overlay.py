"""Relevance drawn over an image: a diverging heatmap blended over the grey picture.

Levels are symmetric around zero (±the largest |relevance| of the image), so white means "no
relevance", red "for the explained class", blue "against". Each pixel's colour covers the grey image
in proportion to the square root of its relevance's share of that largest value, times the
opacity: the picture stays readable where nothing is relevant, and weak relevance still shows.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QImage

from workbench.gui.plotting.colors import RELEVANCE_COLORMAP


@lru_cache(maxsize=1)
def relevance_lut() -> np.ndarray:
    """The relevance colour map as 256 RGB rows, row 0 for −limit, row 255 for +limit."""
    return np.ascontiguousarray(pg.colormap.get(RELEVANCE_COLORMAP).getLookupTable(nPts=256, alpha=False),
                                dtype=np.uint8)


def symmetric_limit(values: np.ndarray) -> float:
    """The largest finite |value|, for levels ±limit centred at zero; 1.0 when there is none."""
    finite = np.abs(np.asarray(values, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    limit = float(finite.max()) if finite.size else 0.0
    return limit if limit > 0 else 1.0


def overlay_rgb(pixels: np.ndarray, heatmap: np.ndarray | None, opacity: float,
                limit: float | None = None) -> np.ndarray:
    """An H×W×3 uint8 picture: `pixels` (H×W×C uint8) in grey with `heatmap` (H×W, signed) over it."""
    pixels = np.asarray(pixels)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    grey = pixels.astype(np.float32).mean(axis=2) if pixels.shape[2] != 3 else \
        pixels.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    base = np.repeat(grey[:, :, None], 3, axis=2)
    if heatmap is None or opacity <= 0:
        return np.ascontiguousarray(base.astype(np.uint8))
    heat = np.nan_to_num(np.asarray(heatmap, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    if heat.shape != grey.shape:
        raise ValueError(f"heatmap of shape {heat.shape} does not match the image's {grey.shape}")
    limit = symmetric_limit(heat) if limit is None else limit
    share = np.clip(heat / np.float32(limit), -1.0, 1.0)
    colour = relevance_lut()[np.rint((share + 1.0) * 127.5).astype(np.int64)].astype(np.float32)
    alpha = (np.float32(min(1.0, opacity)) * np.sqrt(np.abs(share)))[:, :, None]
    return np.ascontiguousarray(np.rint(base * (1 - alpha) + colour * alpha).astype(np.uint8))


def to_rgb_qimage(rgb: np.ndarray) -> QImage:
    """An H×W×3 uint8 array as a QImage that owns its memory."""
    h, w, _ = rgb.shape
    return QImage(np.ascontiguousarray(rgb).tobytes(), w, h, 3 * w, QImage.Format.Format_RGB888).copy()


def overlay_image(pixels: np.ndarray, heatmap: np.ndarray | None, opacity: float,
                  limit: float | None = None) -> QImage:
    """`overlay_rgb` as a QImage; pass `limit` to draw to the levels a colour scale beside it shows."""
    return to_rgb_qimage(overlay_rgb(pixels, heatmap, opacity, limit))
