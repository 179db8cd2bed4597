"""``lengen reproduce tra-flipflop``: the TRA paper's Table 1 (see :mod:`.recipe` for the
protocol and scales, :mod:`.published` for the paper's numbers, :mod:`.report` for the table and
figures, :mod:`.cli` for the command-line arguments)."""
from lengen.recipes.tra_flipflop.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.tra_flipflop.recipe import __all__  # noqa: F401
