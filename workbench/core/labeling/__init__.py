"""Human validity labelling: the label store, consensus, agreement, studies and exchange files."""
