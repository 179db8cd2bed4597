"""``lengen reproduce index-warping``: Fig. 5, Table A, Fig. 6 and Fig. C of "Improving Length
Generalization via Position Index Warping" (see :mod:`.recipe` for the protocol and scales,
:mod:`.published` for the paper's numbers, :mod:`.report` for tables and figures, :mod:`.cli` for
the command-line arguments)."""
from lengen.recipes.index_warping.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.index_warping.recipe import __all__  # noqa: F401
