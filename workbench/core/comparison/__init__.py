"""Comparing test sets: covered items per input, resampled figures, overlaps, set algebra and reports."""
