"""Robustness-oriented testing (RobOT): first-order loss, attacks, selection, fuzzing, retraining.

Methods: docs/methods/fol-and-selection.md and docs/methods/fuzzing-and-retraining.md.
- `scores`: FOL (FOSC L∞ / L2 and the RobOT fuzzer's gradient norm) and the softmax uncertainty scores;
- `attacks`: FGSM with random start and PGD; `pool`: the candidate pool of successful adversarials;
- `selection`: BE-ST, KM-ST, DeepGini, random, MCP, coverage-greedy and the artifact's KM-ST;
- `fuzzing`: the FOL-guided fuzzer;
- `retraining`: fine-tuning presets and checkpointing; `reports`: static AE, adaptive and clean accuracy;
- `experiment`: the RobOT protocol over strategies × budgets × seeds, with `experiment_report` writing it;
- `convergence`: the rounds of attack and fine-tuning; `runs`: runs stored in a project.
"""
