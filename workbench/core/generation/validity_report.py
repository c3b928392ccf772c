"""The validity proxies on a test set: every input judged, and the shares per generator and extent
(`workbench validity`). Proxies, not verdicts of validity: the report's words say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.execution.jobs import JobContext
from workbench.core.generation.validity import MAIN_QUANTILE


@dataclass
class ValidityReport:
    testset: str
    validators: str
    quantile: float
    groups: list = field(default_factory=list)  # one row per generator and extent (or one for the whole set)
    validator_summary: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"testset": self.testset, "validators": self.validators, "quantile": self.quantile,
                "groups": self.groups, "validator_summary": [list(r) for r in self.validator_summary],
                "note": "Automated proxies of validity, not verdicts: compare them with human labels."}

    def text(self) -> str:
        lines = [f"Validity proxies on {self.testset} (automated proxies, not verdicts of validity), validators "
                 f"{self.validators}, SelfOracle at the gamma quantile {self.quantile:g}:",
                 f"{'group':<34} {'inputs':>6} {'SelfOracle ok':>14} {'DAIV ok':>8} {'both ok':>8} "
                 f"{'oracle: kept / changed / unsure':>32}"]
        for g in self.groups:
            n = max(g["inputs"], 1)
            lines.append(f"{g['group']:<34} {g['inputs']:>6} {g['selforacle_valid'] / n * 100:>13.1f}% "
                         f"{g['daiv_valid'] / n * 100:>7.1f}% {g['both_valid'] / n * 100:>7.1f}% "
                         f"{g['oracle_preserved']:>14} / {g['oracle_changed']} / {g['oracle_uncertain']}")
        lines.append("SelfOracle share accepted at each quantile: " + "; ".join(
            f"{g['group']}: " + ", ".join(f"{q} {v * 100:.0f}%" for q, v in g["selforacle_by_quantile"].items())
            for g in self.groups))
        return "\n".join(lines)


def proxy_groups(columns: dict, verdicts: dict, thresholds: dict) -> list[dict]:
    """Per generator and extent (when the set has those columns): inputs, how many each proxy accepts,
    the oracle's verdicts on the inputs both validity proxies accept, and SelfOracle's acceptance at
    every fitted quantile."""
    from workbench.core.generation.validity import invalid_by_loss
    from workbench.core.project.store import text_column

    n = len(verdicts["proxy_selforacle_loss"])
    if "generator" in columns and "extent" in columns:
        keys = np.array([f"{g} ({e})" for g, e in zip(text_column(columns["generator"]),
                                                      text_column(columns["extent"]))])
    else:
        keys = np.array(["all inputs"] * n)
    so_ok = ~np.asarray(verdicts["proxy_selforacle_invalid"], bool)
    daiv_ok = ~np.asarray(verdicts["proxy_daiv_invalid"], bool)
    oracle = np.asarray(verdicts["proxy_oracle_verdict"]).astype(str)
    loss = np.asarray(verdicts["proxy_selforacle_loss"], dtype=np.float64)
    groups = []
    for key in dict.fromkeys(keys):
        mine = keys == key
        both = mine & so_ok & daiv_ok
        groups.append({"group": str(key), "inputs": int(mine.sum()), "selforacle_valid": int((mine & so_ok).sum()),
                       "daiv_valid": int((mine & daiv_ok).sum()), "both_valid": int(both.sum()),
                       "oracle_preserved": int((both & (oracle == "preserved")).sum()),
                       "oracle_changed": int((both & (oracle == "changed")).sum()),
                       "oracle_uncertain": int((both & (oracle == "uncertain")).sum()),
                       "selforacle_by_quantile": {q: float((~invalid_by_loss(loss[mine], float(t))).mean())
                                                  for q, t in thresholds.items()}})
    return groups


def judge_testset(ctx: JobContext, project_folder, testset: str, data: str | None = None, validators: str | None = None,
                  quantile: float = MAIN_QUANTILE, download: bool = False) -> ValidityReport:
    """Judge every input of `testset` with the validator set `validators` (the bundled one of the set's
    dataset when not given)."""
    from workbench.core.data.registry import load_dataset
    from workbench.core.generation.validators import load_validators
    from workbench.core.labeling.labelled_sets import resolve
    from workbench.core.project.folder import Project

    project = Project.open(project_folder) if project_folder else None
    # a stored set needs no dataset to be read (its images are in the project): only --data is loaded
    dataset = load_dataset(data, download=download) if data else None
    chosen = resolve(project, testset, dataset, ctx=ctx, download=download)
    key = chosen.source.dataset or data or (project.datasets[0] if project is not None and project.datasets else "")
    loaded = load_validators(validators, key, device=ctx.device)  # a folder for another dataset is refused
    loaded.loss_threshold(quantile)  # an unfitted quantile is refused before the work
    verdicts = loaded.judge(ctx, chosen.numpy(), chosen.labels, quantile)
    return ValidityReport(chosen.name, str(loaded.folder.name if not validators else loaded.folder), quantile,
                          proxy_groups(chosen.columns, verdicts, loaded.card.selforacle["thresholds"]),
                          loaded.card.summary())
