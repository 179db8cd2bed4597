"""Zhou et al. (2024) decimal addition: ``lengen reproduce addition`` (see :mod:`.recipe` for the
protocol and scales, :mod:`.specs` for the settings, :mod:`.scores` for the readings,
:mod:`.report` for the tables and figures, :mod:`.cli` for the command-line arguments)."""
from lengen.recipes.addition.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.addition.recipe import __all__ as _recipe_all
from lengen.recipes.addition.scores import pooled  # noqa: F401  (the error analysis, pooled)

__all__ = [*_recipe_all, "pooled"]
