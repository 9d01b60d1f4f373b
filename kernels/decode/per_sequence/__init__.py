"""``decode.per_sequence``: a decode step batched vs one sequence at a time; declared in ``spec``."""
