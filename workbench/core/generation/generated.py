"""Generated sets: the latent search's results as a test set, and the generation job that makes one.

A generated set holds, per kept seed of every generator searched, the best input found (the
misbehaviour, or the closest the search came) with its **intended** label, and these per-input
columns:

- `generator`, `kind`, `extent` (text), `seed` (the seed's index in its run), `source_index` (the test
  image a VAE seed encodes, −1 for prior draws), `objective`, `generations`, `found` (the objective's
  success: a misbehaviour, or a new IDC combination), `finished` (False when the run was stopped while
  the seed searched), `predicted` (the classifier's label of the input), `margin` (its logit margin),
  `idc_code` (its IDC combination under an IDC objective, else −1), `distance` (latent distance
  travelled);
- `seed_x` (the seed's decoded image), `genome` and `seed_genome` (NaN-padded to the longest genome
  of the set; `genome_length` says how many values are the genome's), `fitness` (the best margin
  after each generation, NaN-padded to the longest search of the set);
- with validators, every proxy's score and verdict (`proxy_…`, see `validity`; the oracle's verdict is
  given for every input, the summary counts it on those both validity proxies accept), and
  `proxy_oracle_agrees_with_model`: the model misbehaves and the oracle reads the same wrong class.

Coverage, FOL, selection, labelling and comparison take it like any other test set. `benchmark_rows`
gives the GenAI-TIG benchmark's per-seed CSV columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.tig import BUDGET, GenerationRun, generate
from workbench.core.project.store import text_column

ROLE = "generated"
#: The benchmark's per-seed CSV columns, then the workbench's own.
CSV_COLUMNS = ("Filename", "Tool", "Mutation_extent", "Seed", "Iteration", "Expected_label(X)", "Predicted_label(Y)",
               "Classification", "Found", "Margin", "Latent_distance")
#: every column a generated set must hold to be shown, summed up and exported
REQUIRED = ("x", "y", "generator", "kind", "extent", "seed", "generations", "found", "finished", "predicted",
            "seed_x", "fitness")


@dataclass
class GenerationResult:
    """What the generation job hands back: the runs, the generated set's arrays and where it was saved."""

    runs: list
    arrays: dict
    name: str = ""
    saved: bool = False
    partial: bool = False
    not_run: list = field(default_factory=list)  # generators a stop left out
    stored_summary: list | None = None  # a set read back from a project: the summary saved with it
    dataset: str = ""  # the dataset whose classes label the inputs

    def summary(self) -> list[dict]:
        if self.stored_summary is not None and not self.runs:
            return [dict(row) for row in self.stored_summary]
        return summary_rows(self.arrays, self.runs)

    def testset(self):
        """The generated set as a `TestSet` (before, or without, saving it in a project)."""
        from workbench.core.testsets import RESERVED_ARRAYS, Source, TestSet, content_ids

        a = self.arrays
        return TestSet(self.name, Source("stored", role=ROLE), a["x"], a["y"], content_ids(a["x"]),
                       {k: v for k, v in a.items() if k not in RESERVED_ARRAYS})


def _padded(rows: list, width: int) -> np.ndarray:
    out = np.full((len(rows), max(width, 1)), np.nan, dtype=np.float32)
    for i, row in enumerate(rows):
        row = np.asarray(row, dtype=np.float32).reshape(-1)
        out[i, :len(row)] = row
    return out


def generated_arrays(runs: list[GenerationRun]) -> dict[str, np.ndarray]:
    """The test-set arrays of the module docstring for the runs' searched seeds, generator by generator."""
    rows = [(run, r) for run in runs for r in run.results]
    if not rows:
        return {}
    images = np.stack([r.best_image for _, r in rows]).astype(np.float32)
    width = max(len(r.best_genome) for _, r in rows)
    return {
        "x": images,
        "y": np.array([r.label for _, r in rows], dtype=np.int64),
        "generator": np.array([run.generator for run, _ in rows]),
        "kind": np.array([run.params.get("kind", "") for run, _ in rows]),
        "extent": np.array([run.extent for run, _ in rows]),
        "seed": np.array([r.seed for _, r in rows], dtype=np.int64),
        "source_index": np.array([run.seeds.source_index[r.seed] for run, r in rows], dtype=np.int64),
        "generations": np.array([r.generations for _, r in rows], dtype=np.int64),
        "found": np.array([r.found for _, r in rows], dtype=bool),
        "finished": np.array([r.finished for _, r in rows], dtype=bool),
        "predicted": np.array([r.predicted for _, r in rows], dtype=np.int64),
        "margin": np.array([r.margin for _, r in rows], dtype=np.float32),
        "objective": np.array([run.params.get("objective", "misbehaviour") for run, _ in rows]),
        "idc_code": np.array([r.code for _, r in rows], dtype=np.int64),
        "distance": np.array([r.distance for _, r in rows], dtype=np.float32),
        "seed_x": np.stack([run.seeds.images[r.seed] for run, r in rows]).astype(np.float32),
        "genome": _padded([r.best_genome for _, r in rows], width),
        "seed_genome": _padded([run.seeds.genomes[r.seed] for run, r in rows], width),
        "genome_length": np.array([len(r.best_genome) for _, r in rows], dtype=np.int64),
        "fitness": _padded([r.fitness for _, r in rows], max(len(r.fitness) for _, r in rows)),
    }


def summary_rows(columns: dict, runs: list[GenerationRun] | None = None) -> list[dict]:
    """Per generator and extent: seeds tried and kept (with the runs), seeds whose search succeeded
    (`found`: a misbehaviour, or a new IDC combination under an IDC objective) and the mean generations
    they took, misbehaviours among the inputs (the same count under the benchmark's objective), the
    distinct new IDC combinations reached, and how many successes each proxy accepts (proxies, not
    verdicts of validity)."""
    if not columns or "generator" not in columns:
        return []
    generator, extent = text_column(columns["generator"]), text_column(columns["extent"])
    found = np.asarray(columns["found"], dtype=bool)
    tried = {(run.generator, run.extent): (len(run.seeds.labels), int(run.seeds.kept.sum())) for run in runs or []}
    out = []
    for key in dict.fromkeys(zip(generator, extent)):
        mine = (generator == key[0]) & (extent == key[1])
        hits = mine & found
        gens = np.asarray(columns["generations"])[hits]
        wrong = mine & (np.asarray(columns["predicted"]) != np.asarray(columns["y"])) if "y" in columns else hits
        row = {"generator": key[0], "extent": key[1], "searched": int(mine.sum()), "found": int(hits.sum()),
               "misbehaviours": int(wrong.sum()),
               "mean_generations": float(gens.mean()) if len(gens) else None,
               "unfinished": int((mine & ~np.asarray(columns.get("finished", np.ones_like(found)), bool)).sum())}
        if key in tried:
            row["seeds"], row["kept"] = tried[key]
        if "objective" in columns and {"idc", "both"} & set(text_column(columns["objective"])[mine].tolist()):
            row["new_combinations"] = int(len(np.unique(np.asarray(columns["idc_code"])[hits])))
        if "proxy_selforacle_invalid" in columns:
            so_ok = ~np.asarray(columns["proxy_selforacle_invalid"], bool)
            daiv_ok = ~np.asarray(columns["proxy_daiv_invalid"], bool)
            preserved = text_column(columns["proxy_oracle_verdict"]) == "preserved"
            row.update({"proxy_selforacle_valid": int((hits & so_ok).sum()),
                        "proxy_daiv_valid": int((hits & daiv_ok).sum()),
                        "proxy_both_valid": int((hits & so_ok & daiv_ok).sum()),
                        "proxy_valid_preserved": int((hits & so_ok & daiv_ok & preserved).sum())})
            if "proxy_oracle_agrees_with_model" in columns:
                row["proxy_oracle_agrees"] = int((mine & np.asarray(columns["proxy_oracle_agrees_with_model"],
                                                                    bool)).sum())
        out.append(row)
    return out


def run_generation(ctx: JobContext, generators: list, classifier, dataset, n_seeds: int, extent: str = "high",
                   budget: int = BUDGET, seed: int = 0, validators=None, name: str = "", project=None,
                   command: str = "", objective: str = "misbehaviour", layer: str | None = None,
                   m: int = 6) -> GenerationResult:
    """The generation job: search each of `generators` ((name, Generator) pairs) from `n_seeds` seeds
    for `objective` ("misbehaviour", or "idc" / "both" with IDC of `layer` and `m` fitted on the
    dataset, its test split the reference), judge every result with `validators` (when given), and
    save the generated set as the test set `name` of `project` (when given). A stop keeps what was
    found: the run stopped is marked partial and the generators after it are not searched."""
    if not generators:
        raise WorkbenchError("No generator was given.", "Choose at least one generator.")
    from workbench.core.generation.objectives import OBJECTIVES, Misbehaviour, idc_objective

    if objective not in OBJECTIVES:
        raise WorkbenchError(f"Unknown objective {objective!r}.", f"Use one of {', '.join(OBJECTIVES)}.")
    test = dataset.splits.get("test")
    images = test if test is not None and len(test) else dataset.split("train")
    setup = objective != "misbehaviour"
    steps = len(generators) + (1 if validators is not None else 0) + setup
    goal = idc_objective(ctx.stage(0, steps, "IDC of the reference set"), classifier, dataset, layer, m,
                         misbehave=objective == "both", seed=seed) if setup else Misbehaviour()
    runs, not_run = [], []
    for i, (label, generator) in enumerate(generators):
        if ctx.stopped_early:
            not_run.append(label)
            continue
        try:
            run = generate(ctx.stage(i + setup, steps, label, partials=True), generator.to(ctx.device), classifier,
                           n_seeds, extent, budget, seed, images, label, objective=goal)
        except Cancelled:  # stopped before this generator's search began (its seeds): keep the earlier ones
            if not runs:
                raise
            ctx.keep_what_was_found()
            not_run.append(label)
            continue
        runs.append(run)
    arrays = generated_arrays(runs)
    if arrays and validators is not None:
        judged = validators.to(ctx.device).judge(ctx.stage(steps - 1, steps, "validity proxies"), arrays["x"],
                                                 arrays["y"])
        # where the model misbehaves: does the oracle read the same wrong class (the input may really show it)?
        wrong = arrays["predicted"] != arrays["y"]
        judged["proxy_oracle_agrees_with_model"] = wrong & (judged["proxy_oracle_label"] == arrays["predicted"])
        arrays.update(judged)
    partial = ctx.stopped_early
    result = GenerationResult(runs, arrays, name, False, partial, not_run, dataset=dataset.spec)
    if not_run:
        ctx.notice(f"Not searched after the stop: {', '.join(not_run)}.")
    if project is not None and arrays and name:
        from workbench.core.testsets import save_testset

        save_testset(project, name, arrays, role=ROLE, dataset=dataset.spec, model=classifier.name,
                     model_fingerprint=classifier.fingerprint(), partial=partial, not_run=not_run,
                     runs=[run.params for run in runs], summary=summary_rows(arrays, runs),
                     validators=str(validators.folder) if validators is not None else "",
                     validator_card=validators.card.to_dict() if validators is not None else None, command=command)
        result.saved = True
    return result


def generate_from_folders(ctx: JobContext, folders: list, classifier, dataset, n_seeds: int, extent: str = "high",
                          budget: int = BUDGET, seed: int = 0, proxies: bool = True, validators: str = "",
                          name: str = "", project=None, command: str = "", objective: str = "misbehaviour",
                          layer: str | None = None, m: int = 6) -> GenerationResult:
    """`run_generation` for generator folders (or bundled names) read here, judged by the validators
    `choose_validators` picks: the window's way, which hands the job names, not loaded models."""
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.validators import choose_validators

    ctx.progress(0, 1, "reading the generators")
    generators = [(label, load_generator(folder, num_classes=dataset.num_classes)) for label, folder in folders]
    judge, note = choose_validators(dataset, validators, proxies)
    if note:
        ctx.notice(note)
    return run_generation(ctx, generators, classifier, dataset, n_seeds, extent, budget, seed, judge, name,
                          project=project, command=command, objective=objective, layer=layer, m=m)


def default_name(model: str, extent: str, objective: str = "misbehaviour") -> str:
    """The name a generated set is saved under unless the user gives one."""
    return f"generated-{model}-{extent}" + ("" if objective == "misbehaviour" else f"-{objective}")


def latest_generated(project) -> str | None:
    """The name of the generated set saved last in `project` (None if it has none)."""
    from workbench.core.testsets import list_testsets

    made = [(str(info.extra.get("created", "")), i, info.name) for i, info in enumerate(list_testsets(project))
            if info.source.role == ROLE and not info.problem]
    return max(made)[2] if made else None  # the newest; a set saved again under its name counts as new


def load_generated(ctx: JobContext, project, name: str) -> GenerationResult:
    """A generated set of `project` read back as the generation job handed it out (its runs' seeds are
    not stored: the summary saved with it stands for them)."""
    ctx.progress(0, 1, f"reading generated set {name}")
    artifact = project.load_artifact(name, kind="testset")
    how = artifact.provenance
    if how.get("role") != ROLE:
        raise WorkbenchError(f"Test set {name!r} is not a generated set.", "Choose a set made by a latent search.")
    arrays = {key: artifact[key] for key in artifact.names}
    missing = [k for k in REQUIRED if k not in arrays]
    if missing:
        raise WorkbenchError(f"Generated set {name!r} lacks {', '.join(missing)}.", "Generate it again.")
    uneven = sorted(k for k in REQUIRED if len(arrays[k]) != len(arrays["y"]))
    if uneven:
        raise WorkbenchError(f"Generated set {name!r} is damaged: {', '.join(uneven)} do not hold one row per input.",
                             "Generate it again.")
    summary = how.get("summary") if isinstance(how.get("summary"), list) else None
    ctx.progress(1, 1, "read")
    return GenerationResult([], arrays, name, True, bool(how.get("partial")), list(how.get("not_run") or []),
                            summary or summary_rows(arrays), str(how.get("dataset", "")))


def generated_for_model(ctx: JobContext, project, name: str, model, dataset) -> dict:
    """The arrays of the generated set `name` of `project`, refused (before they are read) when it was made for
    another dataset or searched against other weights than `model`'s: its misbehaviours are the searched model's,
    and retraining takes them as that model's."""
    how = project.artifacts("testset").get(name, {}).get("provenance", {})
    if how.get("dataset") and how["dataset"] != dataset.spec:
        raise WorkbenchError(f"Generated set {name!r} was made for dataset {how['dataset']!r}, not {dataset.spec!r}.",
                             f"Use the dataset {how['dataset']!r}.")
    stored = how.get("model_fingerprint")
    if stored and stored != model.fingerprint():
        raise WorkbenchError(f"Generated set {name!r} was searched against model {how.get('model')!r} with other "
                             f"weights than {model.name!r}: its misbehaviours are that model's.",
                             "Use the model the set was generated for, or generate a set for this one.")
    return load_generated(ctx, project, name).arrays


def safe_name(text: str) -> str:
    """`text` as one file-name part: its last path component, with anything but letters, digits, '.', '-'
    and '_' replaced (a generator named by its folder's path stays inside the export folder)."""
    import re
    from pathlib import PurePath

    return re.sub(r"[^A-Za-z0-9._-]", "_", PurePath(str(text)).name).strip(".") or "generator"


def benchmark_rows(testset) -> list[dict]:
    """The benchmark's per-seed CSV rows (then the proxies' columns) of a generated test set."""
    c = testset.columns
    needed = ("generator", "kind", "extent", "seed", "generations", "found", "predicted")
    missing = [k for k in needed if k not in c]
    if missing:
        raise WorkbenchError(f"Test set {testset.name!r} is not a generated set: it has no {', '.join(missing)} column.",
                             "Export a set made by `workbench generate`.")
    tools, generators, extents = testset.tools(), text_column(c["generator"]), text_column(c["extent"])
    proxies = [k for k in c if k.startswith("proxy_")]
    rows = []
    for i in range(len(testset)):
        expected, predicted = int(testset.labels[i]), int(c["predicted"][i])
        row = {"Filename": f"{i:05d}-{safe_name(generators[i])}-{extents[i]}-seed{int(c['seed'][i])}.png", "Tool": tools[i],
               "Mutation_extent": extents[i], "Seed": int(c["seed"][i]), "Iteration": int(c["generations"][i]),
               "Expected_label(X)": expected, "Predicted_label(Y)": predicted,
               "Classification": "misbehaviour" if predicted != expected else "correct", "Found": bool(c["found"][i]),
               "Margin": float(c["margin"][i]) if "margin" in c else "",
               "Latent_distance": float(c["distance"][i]) if "distance" in c else ""}
        for key in proxies:
            value = c[key][i]
            row[key] = value.decode() if isinstance(value, bytes) else (bool(value) if isinstance(value, np.bool_)
                                                                        else value.item() if hasattr(value, "item")
                                                                        else value)
        rows.append(row)
    return rows


def export_generated(testset, folder) -> dict:
    """Write a generated set's per-seed CSV (`records.csv`) and its inputs as PNG files named as the CSV
    says, into the new or empty `folder`; returns the paths written."""
    import csv
    from pathlib import Path

    from PIL import Image

    from workbench.core.files import check_new_folder

    folder = Path(folder)
    check_new_folder(folder, "the export")
    rows = benchmark_rows(testset)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fields = list(CSV_COLUMNS) + [k for k in (rows[0] if rows else {}) if k not in CSV_COLUMNS]
        with open(folder / "records.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        for row, image in zip(rows, testset.numpy()):
            pixels = np.nan_to_num(image[0] if image.shape[0] == 1 else np.moveaxis(image, 0, -1))
            Image.fromarray(np.clip(np.rint(pixels * 255), 0, 255).astype(np.uint8)).save(folder / row["Filename"])
    except OSError as exc:
        raise WorkbenchError(f"Could not write the export into {folder}: {exc.strerror or exc}.",
                             "Choose a folder you can write to, with room on its disk.") from exc
    return {"csv": str(folder / "records.csv"), "images": len(rows), "folder": str(folder)}
