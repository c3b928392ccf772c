"""Robustness-oriented testing (RobOT): first-order loss and uncertainty scores, attacks, selection.

Spec: `spec/robustness.md`. `scores` computes FOL (FOSC L∞ / L2 forms and the RobOT fuzzer's
gradient norm) and the softmax uncertainty scores; `attacks` builds the FGSM/PGD candidate pool;
`selection` picks tests from a pool (BE-ST, KM-ST, DeepGini, random, MCP).
"""
