"""The Qt binding keeps Python's reference counts straight.

PySide6 6.12.0 drops a reference to None (and to True/False) on every call of a method that returns
nothing, when it runs on Python 3.10/3.11 (where None is not immortal): after a few thousand calls
the interpreter aborts with "deallocating None". The workbench needs a release without that fault
(6.11.3 works); this test fails loudly if one slips back in.
"""

from __future__ import annotations

import sys

import pytest
from PySide6.QtGui import QColor

pytestmark = pytest.mark.gui


def test_void_methods_do_not_drop_references_to_none(qapp):
    color = QColor("red")
    before_none, before_true = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(1000):
        color.setRed(3)  # returns None
        color.isValid()  # returns True
    assert sys.getrefcount(None) - before_none > -100, "this PySide6 release corrupts refcounts: use another"
    assert sys.getrefcount(True) - before_true > -100, "this PySide6 release corrupts refcounts: use another"
