"""Consensus (the GenAI-TIG benchmark's rules), the labelling key map, and answers as label files write them."""

from __future__ import annotations

import itertools
import json

import pytest

from workbench.core.data.class_names import DIGIT_CLASSES, FASHION_CLASSES
from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import (
    CIFAR10_CLASSES,
    DIFFERENT,
    INVALID,
    is_valid,
    keeps_label,
    options_for,
    parse_answer,
)
from workbench.core.labeling.consensus import (
    NA,
    NO,
    PENDING,
    TIE,
    YES,
    Consensus,
    consensus,
)
from workbench.core.labeling.keymap import (
    ACTIONS,
    DEFAULT_KEYMAP,
    checked_keymap,
    key_actions,
    normalise_key,
    parse_keymap,
)

EXPECTED = "0"
CLASSES = ("0", "1", "2")
ANSWERS = (*CLASSES, INVALID, DIFFERENT)

# ---------------------------------------------------------------- consensus, by hand

# (answers) → (validity, preservation), with expected label "0"; other classes are "1" and "2".
TWO_RATERS = {
    ("0", "0"): (YES, YES),  # both valid, both the expected label
    ("0", "1"): (YES, NA),  # both valid, one the expected label
    ("1", "0"): (YES, NA),
    ("1", "1"): (YES, NO),  # both valid, neither the expected label (the same other class)
    ("1", "2"): (YES, NO),  # (two different other classes)
    (INVALID, INVALID): (NO, NA),  # both invalid: preservation does not apply
    (INVALID, "0"): (NA, NA),  # one invalid, one the expected label
    ("0", INVALID): (NA, NA),
    (INVALID, "1"): (NA, NO),  # one invalid, one another class: nobody kept the label
    ("2", INVALID): (NA, NO),
    (DIFFERENT, DIFFERENT): (YES, NO),  # "a different item" is valid and not the expected label
    (DIFFERENT, "0"): (YES, NA),
    (DIFFERENT, "1"): (YES, NO),
    (INVALID, DIFFERENT): (NA, NO),
}

# (answers) → (validity, preservation, validity majority, preservation majority)
MORE_RATERS = {
    ("0", "0", "0"): (YES, YES, YES, YES),
    (INVALID, INVALID, INVALID): (NO, NA, NO, NA),
    ("1", "2", DIFFERENT): (YES, NO, YES, NO),
    ("0", "0", "1"): (YES, NA, YES, YES),
    ("0", "1", "1"): (YES, NA, YES, NO),
    ("0", "0", INVALID): (NA, NA, YES, YES),
    ("0", "1", INVALID): (NA, NA, YES, NO),  # 1 of 3 kept the label
    (INVALID, INVALID, "0"): (NA, NA, NO, NA),  # the majority found it invalid
    (INVALID, INVALID, "1"): (NA, NO, NO, NA),
    ("0", "0", INVALID, INVALID): (NA, NA, TIE, TIE),
    ("0", "1", "2", DIFFERENT): (YES, NA, YES, NO),
    ("0", "0", "1", "2"): (YES, NA, YES, TIE),
    ("0", INVALID, INVALID, INVALID): (NA, NA, NO, NA),
}


@pytest.mark.parametrize("answers", list(TWO_RATERS), ids=lambda a: "/".join(a))
def test_two_raters_by_hand(answers):
    c = consensus(list(answers), EXPECTED)
    assert (c.validity, c.preservation) == TWO_RATERS[answers]
    assert c.raters == 2 and c.decided


def test_two_raters_majority_columns_by_hand():
    # with two raters "more than half" means both, and one each way is a tie
    assert consensus(["0", "0"], EXPECTED).validity_majority == YES
    assert consensus([INVALID, INVALID], EXPECTED).validity_majority == NO
    assert consensus([INVALID, INVALID], EXPECTED).preservation_majority == NA
    assert consensus([INVALID, "0"], EXPECTED).validity_majority == TIE
    assert consensus([INVALID, "0"], EXPECTED).preservation_majority == TIE
    assert consensus(["0", "1"], EXPECTED).preservation_majority == TIE
    assert consensus(["1", "1"], EXPECTED).preservation_majority == NO


@pytest.mark.parametrize("answers", list(MORE_RATERS), ids=lambda a: "/".join(a))
def test_more_raters_all_none_and_majority_by_hand(answers):
    c = consensus(list(answers), EXPECTED)
    assert (c.validity, c.preservation, c.validity_majority, c.preservation_majority) == MORE_RATERS[answers]
    assert c.raters == len(answers)


def test_fewer_answers_than_the_study_asks_for_are_pending():
    for answers, min_raters in (([], 2), (["0"], 2), (["0", "0"], 3), ([], 1), ([INVALID], 2)):
        c = consensus(answers, EXPECTED, min_raters)
        assert c == Consensus(PENDING, PENDING, PENDING, PENDING, len(answers))
        assert not c.decided
    assert consensus(["0"], EXPECTED, min_raters=1) == Consensus(YES, YES, YES, YES, 1)
    assert consensus([INVALID], EXPECTED, min_raters=1) == Consensus(NO, NA, NO, NA, 1)
    assert consensus([], EXPECTED, min_raters=0).validity == PENDING  # no answer is never a consensus


def test_the_expected_label_is_compared_as_text():
    assert consensus(["963", "963"], 963).preservation == YES
    assert consensus(["3", "3"], "3").preservation == YES


# ---------------------------------------------------------------- consensus, brute force


def rules(answers: tuple[str, ...], expected: str) -> tuple[str, str, str, str]:
    """The rules as the benchmark states them, written out again without the module's helpers."""
    n = len(answers)
    valid = [a != "invalid" for a in answers]
    kept = [a == expected for a in answers]
    if all(valid):
        validity = "yes"
    elif not any(valid):
        validity = "no"
    else:
        validity = "N/A"
    if validity == "no":
        preservation = "N/A"
    elif all(kept):
        preservation = "yes"
    elif not any(kept):
        preservation = "no"
    else:
        preservation = "N/A"

    def majority(flags):
        yes = sum(flags)
        return "yes" if yes > n - yes else "no" if yes < n - yes else "tie"

    validity_majority = majority(valid)
    preservation_majority = "N/A" if validity_majority == "no" else majority(kept)
    return validity, preservation, validity_majority, preservation_majority


@pytest.mark.parametrize("raters", [2, 3, 4])
def test_every_combination_of_answers_against_the_rules(raters):
    seen = set()
    for expected in CLASSES:
        for answers in itertools.product(ANSWERS, repeat=raters):
            c = consensus(list(answers), expected)
            got = (c.validity, c.preservation, c.validity_majority, c.preservation_majority)
            assert got == rules(answers, expected), (answers, expected)
            assert c.raters == raters
            seen.add(got[:2])
    assert seen >= {(YES, YES), (YES, NA), (YES, NO), (NO, NA), (NA, NA), (NA, NO)}
    assert (NO, YES) not in seen and (NO, NO) not in seen  # preservation never applies to an invalid image


def test_the_hand_tables_agree_with_the_brute_force_rules():
    for answers, (validity, preservation) in TWO_RATERS.items():
        assert rules(answers, EXPECTED)[:2] == (validity, preservation)
    for answers, expected in MORE_RATERS.items():
        assert rules(answers, EXPECTED) == expected


def test_per_rater_valid_and_label_kept():
    assert is_valid("3") and is_valid(DIFFERENT) and not is_valid(INVALID)
    assert keeps_label("3", "3") and keeps_label("3", 3)
    assert not keeps_label(DIFFERENT, "3") and not keeps_label(INVALID, "3") and not keeps_label("4", "3")


# ---------------------------------------------------------------- answers as files write them


@pytest.mark.parametrize("text, stored", [
    ("Not a Digit", INVALID),
    ("not a real world object", INVALID),
    ("Not a clothing item", INVALID),
    ("Not a real-world object", INVALID),
    ("  not an object ", INVALID),
    ("invalid", INVALID),
    ("Invalid", INVALID),
    ("A different real-world object", DIFFERENT),
    ("A different clothing item", DIFFERENT),
    ("Something else (a valid image of another kind)", DIFFERENT),
    ("different", DIFFERENT),
    ("963", "963"),
    ("3", "3"),
    (" 7 ", "7"),
    ("3.0", "3"),
    ("1e3", "1000"),
    ("2.5", "2.5"),
    ("inf", "inf"),
    ("cat", "cat"),
    ("", None),
    ("   ", None),
    ("nan", None),
    ("NaN", None),
    ("None", None),
    ("N/A", None),
])
def test_parse_answer_on_the_benchmark_texts(text, stored):
    assert parse_answer(text) == stored


def test_parse_answer_of_a_number_cell():
    assert parse_answer(3) == "3" and parse_answer(3.0) == "3" and parse_answer(963) == "963"


@pytest.mark.parametrize("classes", [DIGIT_CLASSES, FASHION_CLASSES, CIFAR10_CLASSES, ["a", "b", "c"]],
                         ids=["digits", "fashion", "cifar10", "own classes"])
def test_every_option_text_reads_back_as_its_answer(classes):
    for different in (None, True, False):
        options = options_for(classes, different)
        answers = [a for a, _ in options.choices()]
        assert answers[: len(classes)] == [str(i) for i in range(len(classes))]
        assert answers[len(classes)] == INVALID
        assert (DIFFERENT in answers) == bool(options.different_text)
        for answer, text in options.choices():
            if answer in (INVALID, DIFFERENT):
                assert parse_answer(text) == answer, text
        assert options.text(None) == "—"


def test_options_offer_a_different_item_where_the_classes_do_not_cover_the_domain():
    assert not options_for(DIGIT_CLASSES).different_text
    assert not options_for(CIFAR10_CLASSES).different_text
    assert options_for(FASHION_CLASSES).different_text == "A different clothing item"
    assert options_for(["x", "y"]).different_text
    assert options_for(DIGIT_CLASSES, different=True).different_text == "A different object"
    assert not options_for(FASHION_CLASSES, different=False).different_text
    assert options_for(DIGIT_CLASSES).invalid_text == "Not a digit"
    assert options_for(DIGIT_CLASSES).text("3") == "Digit 3"
    assert options_for(DIGIT_CLASSES).as_dict()["answers"][-1] == {"answer": INVALID, "text": "Not a digit"}


# ---------------------------------------------------------------- key map


def test_the_default_key_map_has_no_conflicts_and_every_action():
    assert checked_keymap() == DEFAULT_KEYMAP
    assert checked_keymap({}) == DEFAULT_KEYMAP
    keys = [k for ks in DEFAULT_KEYMAP.values() for k in ks]
    assert len(keys) == len(set(keys))
    assert all(normalise_key(k) == k for k in keys)  # written as the module writes keys
    assert set(ACTIONS) == set(DEFAULT_KEYMAP)
    lookup = key_actions(DEFAULT_KEYMAP)
    assert lookup["X"] == "invalid" and lookup["Ctrl+Shift+Z"] == "redo" and lookup["7"] == "answer 7"


def test_overrides_are_laid_over_the_default_action_by_action():
    keymap = checked_keymap({"invalid": "i", "skip": ["k", "ctrl+space"]})
    assert keymap["invalid"] == ["I"]
    assert keymap["skip"] == ["K", "Ctrl+Space"]
    assert keymap["undo"] == ["Ctrl+Z"]  # untouched actions keep their keys
    # a key freed by one override can be taken by another in the same map
    keymap = checked_keymap({"invalid": "S", "skip": "K"})
    assert key_actions(keymap)["S"] == "invalid"
    assert checked_keymap({"different": []})["different"] == []
    assert DEFAULT_KEYMAP["invalid"] == ["X"]  # the default itself is never changed


def test_parse_keymap_reads_json():
    assert parse_keymap('{"next": ["right", "PgDown"]}')["next"] == ["Right", "PgDown"]
    assert parse_keymap("{}") == DEFAULT_KEYMAP
    assert json.loads(json.dumps(parse_keymap('{"undo": "Ctrl+U"}')))["undo"] == ["Ctrl+U"]


@pytest.mark.parametrize("overrides, message", [
    ({"invalid": "S"}, "bound to both"),  # S skips by default
    ({"invalid": "ctrl+z"}, "bound to both"),  # written differently, still Ctrl+Z
    ({"answer 1": "2"}, "bound to both"),
    ({"skip": ["Q", "Q"], "next": "q"}, "bound to both"),
    ({"jump": "J"}, "unknown action"),
    ({"invalid": 5}, "must be a key or a list"),
    ({"invalid": ["X", None]}, "must be a key or a list"),
    ({"invalid": {"key": "X"}}, "must be a key or a list"),
    ({"invalid": "XY"}, "not one key"),
    ({"invalid": "Hyper+X"}, "unknown modifier"),
    ({"invalid": ""}, "names no key"),
    ({"invalid": "Ctrl+"}, "names no key"),
])
def test_bad_key_maps_are_refused_with_the_reason(overrides, message):
    with pytest.raises(WorkbenchError, match=message) as raised:
        checked_keymap(overrides)
    assert raised.value.hint


@pytest.mark.parametrize("text", ['{"invalid": "X"', "not json", "", '{"invalid": X}'])
def test_a_key_map_that_is_not_json_is_refused(text):
    with pytest.raises(WorkbenchError, match="not valid JSON"):
        parse_keymap(text)


@pytest.mark.parametrize("text", ['["X"]', '"X"', "3", "null"])
def test_a_key_map_that_is_not_an_object_is_refused(text):
    if text == "null":  # null reads as "no overrides"
        assert parse_keymap(text) == DEFAULT_KEYMAP
        return
    with pytest.raises(WorkbenchError, match="JSON object"):
        parse_keymap(text)


@pytest.mark.parametrize("text, key", [
    ("ctrl+shift+z", "Ctrl+Shift+Z"),
    ("shift+ctrl+z", "Ctrl+Shift+Z"),  # modifiers in Qt's order
    ("Meta+alt+a", "Alt+Meta+A"),
    (" Ctrl + s ", "Ctrl+S"),
    ("x", "X"),
    ("left", "Left"),
    ("f2", "F2"),
    ("pgdown", "PgDown"),
    ("ctrl+space", "Ctrl+Space"),
    ("1", "1"),
    ("+", "+"),
    ("Shift++", "Shift++"),
    ("ctrl++", "Ctrl++"),
])
def test_key_normalisation(text, key):
    assert normalise_key(text) == key


def test_a_bad_key_is_refused():
    for text in ("", "Ctrl", "F13", "Ctrl+Shift", "Ctrl+", "Super+X", "Ctrl+XY"):
        with pytest.raises(WorkbenchError):
            normalise_key(text)
