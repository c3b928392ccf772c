"""A Gaussian kernel density estimate with Scott's bandwidth, evaluated as a log-density.

The same estimator as scipy's `gaussian_kde` (data covariance with ddof = 1, times the Scott factor
n^(-1/(d+4)) squared, as the kernel covariance), but evaluated in log space with a log-sum-exp, so a
point far from the data gets a large finite surprise instead of an underflowed density of 0 (and an
LSA of +inf). Distances are computed batch by batch with torch in float64, on the job's device.

A singular covariance (a constant or collinear feature, or fewer points than features) has no
density: `SingularDensity` is raised, never a silent zero (docs/methods/classic-criteria.md#lsa).
"""

from __future__ import annotations

import math

import numpy as np


class SingularDensity(ValueError):
    """The data's covariance is singular, so the KDE has no density."""


# A covariance whose smallest eigenvalue is below this fraction of its largest is treated as singular:
# a Cholesky factor would exist only by rounding, and its density would be meaningless.
SINGULAR_RATIO = 1e-12


class GaussianKDE:
    """KDE of `data` (n, d); `logpdf(points)` gives log f̂ at (m, d) points."""

    def __init__(self, data: np.ndarray, device=None, chunk: int = 1024):
        import torch

        data = np.asarray(data, dtype=np.float64)
        n, d = data.shape
        if n < 2 or d == 0:
            raise SingularDensity(f"{n} point(s) in {d} dimension(s) give no covariance")
        self.n, self.d = n, d
        self.factor = n ** (-1.0 / (d + 4))  # Scott's rule
        cov = np.atleast_2d(np.cov(data, rowvar=False, ddof=1))
        eig = np.linalg.eigvalsh(cov)
        if not np.all(np.isfinite(eig)) or eig[0] <= SINGULAR_RATIO * max(eig[-1], 0.0):
            raise SingularDensity(f"the covariance of {n} points in {d} dimensions is singular "
                                  f"(smallest/largest eigenvalue {eig[0]:.3g}/{eig[-1]:.3g})")
        self.device = torch.device(device or "cpu")
        self.chunk = int(chunk)
        chol = np.linalg.cholesky(cov * self.factor ** 2)
        self._chol = torch.from_numpy(chol).to(self.device)
        self._white = self._whiten(torch.from_numpy(data).to(self.device))            # (n, d)
        self._white_sq = (self._white * self._white).sum(1)
        self.log_norm = -math.log(n) - 0.5 * d * math.log(2 * math.pi) - float(np.log(np.diag(chol)).sum())

    def _whiten(self, x):
        import torch

        return torch.linalg.solve_triangular(self._chol, x.T, upper=False).T

    def logpdf(self, points: np.ndarray) -> np.ndarray:
        import torch

        points = np.asarray(points, dtype=np.float64).reshape(-1, self.d)
        out = np.empty(len(points), dtype=np.float64)
        for start in range(0, len(points), self.chunk):
            y = self._whiten(torch.from_numpy(points[start:start + self.chunk]).to(self.device))
            sq = (y * y).sum(1)[:, None] + self._white_sq[None, :] - 2.0 * (y @ self._white.T)
            log_f = torch.logsumexp(-0.5 * sq.clamp_min_(0.0), dim=1) + self.log_norm
            out[start:start + len(y)] = log_f.cpu().numpy()
        return out
