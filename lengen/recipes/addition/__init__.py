"""Zhou et al. (2024) decimal addition: ``lengen reproduce addition`` (see :mod:`.recipe`)."""
