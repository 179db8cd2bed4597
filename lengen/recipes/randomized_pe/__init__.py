"""``lengen reproduce randomized-pe``: Ruoss et al. 2023 (see :mod:`.recipe` for the protocol and
scales, :mod:`.published` for the paper's numbers, :mod:`.report` for the tables and figures,
:mod:`.cli` for the command-line arguments)."""
from lengen.recipes.randomized_pe.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.randomized_pe.recipe import __all__  # noqa: F401
