"""Human validity labelling: the label store, answers, consensus, agreement, studies, sessions and exchange files;
and test sets by name with the human-validated subsets of labelled sets (`labelled_sets.py`)."""
