"""`workbench generators DIR` on generator folders with a bad generator.json: a clean refusal naming the
file and the field (no traceback, exit 2); a card without a hash is read, and the warning says the
weights were not checked and gives their hash."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json
from generator_cards import BAD_CARDS, edited, tiny_folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("generators")
    return {kind: tiny_folder(root, kind) for kind in ("vae", "gan")}


@pytest.mark.parametrize("case, kind, change, field, words", BAD_CARDS, ids=[c[0] for c in BAD_CARDS])
def test_generators_refuses_a_bad_descriptor_cleanly(capsys, folders, tmp_path, case, kind, change, field, words):
    folder = edited(folders[kind], tmp_path / case, change)
    rc, out, err = run_cli(capsys, "generators", folder)
    assert_clean_failure(rc, err, str(folder), field, *words)
    assert out == ""


def test_generators_reads_a_card_without_a_hash_and_says_so(capsys, folders, tmp_path):
    folder = edited(folders["gan"], tmp_path / "no-hash", lambda data: data.pop("weights_sha256"))
    digest = json.loads((folders["gan"] / "generator.json").read_text())["weights_sha256"]
    rc, out, err = run_cli(capsys, "generators", folder)
    assert rc == 0, err
    assert (f"warning: generator.json records no weights_sha256, so the weights were not checked against it "
            f"(their SHA-256, computed now: {digest})") in out
    shown = run_json(capsys, "generators", folder)
    assert any(digest in w and "not checked" in w for w in shown["warnings"])
    rc, out, _ = run_cli(capsys, "generators", folders["gan"])  # with its hash: checked, nothing to say
    assert rc == 0 and "weights_sha256" not in out
