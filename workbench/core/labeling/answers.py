"""What a rater may answer about an image, worded for its dataset, and what each answer means.

Exactly one answer per image: one of the dataset's classes, the dataset's *invalid* option ("Not a
digit", "Not a clothing item", …) or, where the classes do not cover the domain, *a different item*
(a valid image of something else). An answer is stored as text: the class id (the class index for
the workbench's datasets; whatever id an imported file uses, e.g. an ImageNet class number),
`invalid` or `different`.

Per rater, as in the GenAI-TIG benchmark's files: an answer is *valid* unless it is the invalid
option ("a different item" is valid), and it *keeps the label* when it is the expected class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench.core.data.class_names import DIGIT_CLASSES, FASHION_CLASSES

INVALID = "invalid"
DIFFERENT = "different"
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@dataclass(frozen=True)
class AnswerOptions:
    """The question and the answers offered for a dataset."""

    question: str
    classes: tuple[str, ...]  # class index → its name
    invalid_text: str
    different_text: str = ""  # empty when the classes cover the domain

    def choices(self) -> list[tuple[str, str]]:
        """(answer, text) in the order they are offered: the classes, then invalid, then different."""
        out = [(str(i), name) for i, name in enumerate(self.classes)]
        out.append((INVALID, self.invalid_text))
        if self.different_text:
            out.append((DIFFERENT, self.different_text))
        return out

    def text(self, answer: str | None) -> str:
        if answer is None:
            return "—"
        return dict(self.choices()).get(answer, answer)

    def as_dict(self) -> dict:
        return {"question": self.question, "answers": [{"answer": a, "text": t} for a, t in self.choices()]}


def options_for(class_names: list[str] | tuple[str, ...], different: bool | None = None) -> AnswerOptions:
    """The options for a dataset, known by its class names (a file's own classes get a neutral wording).

    Digits and CIFAR-10's classes cover their domains, so "a different item" is offered only for
    garments (optional there: a valid garment of an eleventh kind) and for unknown class lists, unless
    `different` says otherwise."""
    classes = tuple(str(c) for c in class_names)
    if list(classes) == DIGIT_CLASSES:
        options = AnswerOptions("Which digit does the image show?", tuple(f"Digit {c}" for c in classes),
                                "Not a digit")
        default_different = False
    elif list(classes) == FASHION_CLASSES:
        options = AnswerOptions("Which clothing item does the image show?", classes, "Not a clothing item",
                                "A different clothing item")
        default_different = True
    elif list(classes) == CIFAR10_CLASSES:
        options = AnswerOptions("What does the image show?", classes, "Not a real-world object")
        default_different = False
    else:
        options = AnswerOptions("What does the image show?", classes, "Not a valid image",
                                "Something else (a valid image of another kind)")
        default_different = True
    keep = default_different if different is None else different
    if not keep:
        return AnswerOptions(options.question, options.classes, options.invalid_text)
    if not options.different_text:
        return AnswerOptions(options.question, options.classes, options.invalid_text, "A different object")
    return options


def is_valid(answer: str) -> bool:
    """A rater judged the image a valid member of the domain (a different item counts as valid)."""
    return answer != INVALID


def keeps_label(answer: str, expected: str) -> bool:
    return answer == str(expected)


_INVALID_TEXT = re.compile(r"^\s*(not\s+an?\s+|invalid)", re.IGNORECASE)
_DIFFERENT_TEXT = re.compile(r"\bdifferent\b|\bsomething else\b", re.IGNORECASE)


def parse_answer(text: str) -> str | None:
    """An answer as a file writes it, in the stored form: the benchmark's "Not a Digit", "not a real
    world object" → `invalid`; "A different real-world object" → `different`; a class id (3, 963) as it
    is; an empty cell → None (the rater did not see the item)."""
    text = str(text).strip()
    if not text or text.lower() in ("nan", "none", "n/a"):
        return None
    if text in (INVALID, DIFFERENT):
        return text
    if _INVALID_TEXT.match(text):
        return INVALID
    if _DIFFERENT_TEXT.search(text):
        return DIFFERENT
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else text  # "3.0" from a spreadsheet is class 3; "inf" is text
