"""Coverage criteria (methods: docs/methods/idc.md and docs/methods/classic-criteria.md).

Criteria are small estimator-like objects (`protocol.Criterion`): IDC (`idc.py`), the classic
neuron criteria NC, KMNC, NBC, SNAC, TKNC, TKNP (`neuron.py`) and surprise adequacy LSA, DSA, MDSA
with surprise coverage (`surprise.py`); `PerClass` runs any of them per class. `measure_coverage`
(`measure.py`) is the job that streams a model's activations through them. Criteria are created by
name with `create_criterion`; plugins add their own with `PluginRegistry.add_criterion`.
"""

from workbench.core.coverage.idc import IDC
from workbench.core.coverage.measure import CoverageResult, measure_coverage
from workbench.core.coverage.neuron import KMNC, NBC, NC, SNAC, TKNC, TKNP
from workbench.core.coverage.passes import CoverageProgress
from workbench.core.coverage.per_class import PerClass
from workbench.core.coverage.protocol import CoverageValue, Criterion
from workbench.core.coverage.registry import create_criterion, criterion_names
from workbench.core.coverage.surprise import DSA, LSA, MDSA
from workbench.core.models.layers import default_layer

__all__ = ["Criterion", "CoverageValue", "IDC", "NC", "KMNC", "NBC", "SNAC", "TKNC", "TKNP", "LSA", "DSA", "MDSA",
           "PerClass", "create_criterion", "criterion_names", "measure_coverage", "CoverageResult",
           "CoverageProgress", "default_layer"]
