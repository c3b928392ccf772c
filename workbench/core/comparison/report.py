"""A comparison as files: a self-contained HTML report with its plots, a CSV of its figures, and JSON.

The HTML report needs nothing beside it: the plots are PNGs embedded in the page, drawn with
matplotlib's Agg renderer (never pyplot, so no display is needed). It holds the settings and the
provenance behind every number (model and its fingerprint, layer, m, criteria and their fits,
resamples and seed, FOL's ε, the novelty sample, the library versions), the table of figures with
their bootstrap intervals, every pairwise difference with whether the intervals support it, and
what each set adds (the items only it covers, and the exact overlaps of all sets).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path

import numpy as np

from workbench.core.project.store import atomic_text

COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
PERCENT_FIGURES = ("accuracy", "validity", "preservation")


def _is_percent(key: str, figure: dict) -> bool:
    return "total" in figure or key in PERCENT_FIGURES


def figure_text(key: str, figure: dict) -> str:
    """'28.9 % — 74 / 256 [25.0, 31.3]' for a coverage, '87.8 % [86.7, 90.8]' for a rate, '3.17 [2.80, 3.54]'."""
    value = figure.get("value")
    if value is None:
        return "—"
    percent = _is_percent(key, figure)
    scale = 100.0 if percent else 1.0
    unit = " %" if percent else ""
    text = f"{value * scale:.1f}{unit}" if percent else f"{value:.3g}"
    if "total" in figure:
        text += f" — {figure['covered']} / {figure['total']}"
    if figure.get("low") is not None:
        fmt = (lambda v: f"{v * scale:.1f}") if percent else (lambda v: f"{v:.3g}")
        text += f" [{fmt(figure['low'])}, {fmt(figure['high'])}]"
    return text


def table_rows(data: dict) -> tuple[list[str], list[list[str]]]:
    """The figures table: one row per figure, one column per set (the comparison's `to_dict()`)."""
    sets = data["sets"]
    header = ["figure", *(s["name"] for s in sets)]
    rows = [["inputs", *(f"{s['size']:,}" for s in sets)],
            ["misbehaviours", *(f"{s['misbehaviours']:,}" for s in sets)]]
    keys = list(dict.fromkeys(k for s in sets for k in s["figures"]))
    for key in keys:
        rows.append([data["figures"].get(key, key), *(figure_text(key, s["figures"][key]) if key in s["figures"]
                                                       else "—" for s in sets)])
    rows.append(["validity judged by", *(s["validity"] or "—" for s in sets)])
    return header, rows


def write_csv(data: dict, path: str | Path) -> Path:
    """One row per (set, figure): value, interval and counts; then one row per pairwise difference."""
    path = Path(path)
    with atomic_text(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(["set", "figure", "title", "value", "low", "high", "covered", "total"])
        for s in data["sets"]:
            writer.writerow([s["name"], "inputs", "inputs", s["size"], "", "", "", ""])
            for key, f in s["figures"].items():
                writer.writerow([s["name"], key, data["figures"].get(key, key), f.get("value"), f.get("low", ""),
                                 f.get("high", ""), f.get("covered", ""), f.get("total", "")])
        writer.writerow([])
        writer.writerow(["a", "b", "figure", "difference", "low", "high", "size-matched low", "size-matched high",
                         "supported"])
        for d in data["differences"]:
            matched = d.get("size_matched") or {}
            writer.writerow([d["a"], d["b"], d["figure"], d["difference"], d["low"], d["high"], matched.get("low", ""),
                             matched.get("high", ""), d["supported"]])
    return path


def write_json(data: dict, path: str | Path) -> Path:
    path = Path(path)
    with atomic_text(path) as handle:
        json.dump(data, handle, indent=1, default=str)
    return path


# --- plots ------------------------------------------------------------------------------------------------

def _canvas(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(figure)
    return figure


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def coverage_bars(data: dict) -> bytes:
    """Each criterion's coverage per set, with the bootstrap interval as an error bar."""
    sets, criteria = data["sets"], data["criteria"]
    figure = _canvas(1.2 + 0.9 * len(criteria) * max(1, len(sets)) / 2, 3.2)
    axes = figure.add_subplot()
    width = 0.8 / len(sets)
    for k, s in enumerate(sets):
        figures = [s["figures"][c] for c in criteria]
        values = [100 * f["value"] for f in figures]
        low = [100 * (f["value"] - f.get("low", f["value"])) for f in figures]
        high = [100 * (f.get("high", f["value"]) - f["value"]) for f in figures]
        positions = np.arange(len(criteria)) + (k - (len(sets) - 1) / 2) * width
        axes.bar(positions, values, width, color=COLOURS[k % len(COLOURS)], label=s["name"],
                 yerr=np.abs([low, high]), capsize=2, error_kw={"linewidth": 0.8})
    axes.set_xticks(np.arange(len(criteria)), [c.upper() for c in criteria])
    axes.set_ylabel("coverage (%)")
    axes.set_title("Coverage per criterion (bars: 95 % bootstrap interval)", fontsize=9)
    axes.legend(fontsize=7)
    return _png(figure)


def fol_histograms(data: dict, values: dict[str, np.ndarray]) -> bytes:
    figure = _canvas(5.0, 3.0)
    axes = figure.add_subplot()
    finite = [v[np.isfinite(v)] for v in values.values()]
    top = max((np.quantile(v, 0.99) for v in finite if len(v)), default=1.0)
    bins = np.linspace(0, top if top > 0 else 1.0, 40)
    for k, (name, v) in enumerate(values.items()):
        axes.hist(np.clip(v[np.isfinite(v)], 0, bins[-1]), bins=bins, density=True, histtype="stepfilled",
                  alpha=0.35, color=COLOURS[k % len(COLOURS)], label=name)
    axes.set_xlabel(f"FOL∞ at ε = {data['settings']['fol_eps']} (clipped at the 99th percentile)")
    axes.set_ylabel("density")
    axes.legend(fontsize=7)
    return _png(figure)


def growth_curves(data: dict) -> bytes:
    criteria = [c for c in data["criteria"] if c in ("idc", "nc", "kmnc")] or data["criteria"][:2]
    figure = _canvas(3.2 * len(criteria), 3.0)
    for j, criterion in enumerate(criteria):
        axes = figure.add_subplot(1, len(criteria), j + 1)
        for k, s in enumerate(data["sets"]):
            curve = np.asarray(s["growth"].get(criterion, []))
            total = s["figures"][criterion]["total"]
            if len(curve):
                axes.plot(curve[:, 0], 100 * curve[:, 1] / total, color=COLOURS[k % len(COLOURS)], label=s["name"])
        axes.set_xlabel("inputs")
        axes.set_ylabel(f"{criterion.upper()} coverage (%)")
        axes.set_xscale("log")
        if j == 0:
            axes.legend(fontsize=7)
    return _png(figure)


def class_distribution(data: dict) -> bytes:
    names = data["class_names"]
    figure = _canvas(max(4.0, 0.5 * len(names) + 1.5), 3.0)
    axes = figure.add_subplot()
    sets = data["sets"]
    width = 0.8 / len(sets)
    for k, s in enumerate(sets):
        counts = np.asarray(s["class_counts"], dtype=np.float64)
        share = 100 * counts / counts.sum() if counts.sum() else counts
        axes.bar(np.arange(len(names)) + (k - (len(sets) - 1) / 2) * width, share, width,
                 color=COLOURS[k % len(COLOURS)], label=s["name"])
    axes.set_xticks(np.arange(len(names)), names, rotation=45, ha="right", fontsize=7)
    axes.set_ylabel("share of the set's inputs (%)")
    axes.legend(fontsize=7)
    return _png(figure)


def plots(comparison) -> dict[str, bytes]:
    data = comparison.to_dict()
    out = {"coverage": coverage_bars(data), "growth": growth_curves(data), "classes": class_distribution(data)}
    out["fol"] = fol_histograms(data, {n: p.fol for n, p in comparison.profiles.items()})
    return out


# --- the HTML report --------------------------------------------------------------------------------------

def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def verdict(difference: dict) -> str:
    """'yes', 'reversed at equal size' (a size-matched interval on the other side of 0), 'reversed' or
    'not supported'."""
    if difference["supported"]:
        return "yes"
    if difference.get("reversed"):
        return "reversed at equal size" if difference.get("size_matched") else "reversed"
    return "not supported"


# The verdict beside the interval it comes from; the size-matched draws, the longest text, last.
DIFFERENCE_COLUMNS = ("figure", "sets", "difference", "95 % interval", "supported", "size-matched")


def difference_rows(data: dict) -> list[list[str]]:
    """One row per tested difference, in `DIFFERENCE_COLUMNS` order."""
    rows = []
    for d in data["differences"]:
        key = d["figure"]
        percent = key in data["criteria"] or key.endswith("_valid") or key in PERCENT_FIGURES
        scale, unit = (100.0, " pp") if percent else (1.0, "")
        matched = d.get("size_matched")
        rows.append([data["figures"].get(key, key), f"{d['a']} − {d['b']}", f"{d['difference'] * scale:+.2f}{unit}",
                     "—" if d["low"] is None else f"[{d['low'] * scale:+.2f}, {d['high'] * scale:+.2f}]",
                     verdict(d),
                     "—" if not matched else f"{matched['larger']} drawn to {matched['size']} inputs: "
                                             f"[{100 * matched['low']:.1f}, {100 * matched['high']:.1f}] %"])
    return rows


def write_html(comparison, path: str | Path, title: str = "Test-set comparison") -> Path:
    """The self-contained report (module docstring)."""
    from workbench.core.project.store import library_versions

    data = comparison.to_dict()
    images = plots(comparison)
    header, rows = table_rows(data)
    settings = data["settings"]
    overlap_parts = []
    for criterion, overlap in data["overlaps"].items():
        only = ", ".join(f"{name}: {count}" for name, count in overlap["only"].items())
        member_rows = [[" ∩ ".join(m["sets"]), m["items"]] for m in overlap["membership"]]
        overlap_parts.append(f"<h3>{html.escape(criterion.upper())}</h3><p>Items only one set covers — "
                             f"{html.escape(only)}.</p>" + _table(["covered by exactly", "items"], member_rows))
    provenance = {**settings, "versions": library_versions(),
                  "profiles": {s["name"]: s["profile_artifact"] for s in data["sets"]}}
    embedded = "".join(f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                       f"</figure>" for name, png in images.items())
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in data["notes"])
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 100%; }}
pre {{ background: #f6f8fa; padding: 1em; font-size: 12px; overflow-x: auto; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(settings['model'])} on {html.escape(settings['dataset'])}; IDC on layer
{html.escape(str(settings['layer']))} with m = {settings['m']}; intervals: {html.escape(settings['interval'])}
over {settings['resamples']} seeded resamples (seed {settings['seed']}). Coverage intervals come from resampling
each set's inputs and so sit below the observed value (a resample holds about 63 % distinct inputs); a coverage
gap between sets of different sizes is judged by the size-matched draws.</p>
<h2>Figures</h2>{_table(header, rows)}
<h2>Plots</h2>{embedded}
<h2>Differences</h2><p>The interval of a coverage difference between sets of different sizes is the size-matched
one: the larger set drawn down to the smaller's size.</p>{_table(list(DIFFERENCE_COLUMNS), difference_rows(data))}
<h2>What each set adds</h2>{''.join(overlap_parts)}
{f'<h2>Notes</h2><ul>{notes}</ul>' if notes else ''}
<h2>Provenance</h2><pre>{html.escape(json.dumps(provenance, indent=1, default=str))}</pre>
</body></html>
"""
    path = Path(path)
    with atomic_text(path) as handle:
        handle.write(page)
    return path
