"""``lengen reproduce index-warping-lm``: the language-modelling study of the index-warping paper
(see :mod:`.recipe` for the protocol and scales, :mod:`.published` for the paper's numbers,
:mod:`.report` for the tables and figures, :mod:`.cli` for the command-line arguments)."""
from lengen.recipes.index_warping_lm.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.index_warping_lm.recipe import __all__  # noqa: F401
