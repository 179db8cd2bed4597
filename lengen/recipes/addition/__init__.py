"""Zhou et al. (2024) decimal addition: ``lengen reproduce addition`` (see :mod:`.recipe` for the
protocol and scales, :mod:`.specs` for the settings, :mod:`.scores` for the readings,
:mod:`.report` for the tables and figures, :mod:`.cli` for the command-line arguments)."""
from lengen.recipes.addition.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.addition.recipe import __all__ as _recipe_all
from lengen.recipes.addition.report import error_runs, write_claims  # noqa: F401  (re-judging)
from lengen.recipes.addition.scores import pooled, run_scores  # noqa: F401  (the readings)
from lengen.recipes.addition.specs import max_test_length  # noqa: F401

__all__ = [*_recipe_all, "pooled", "run_scores", "error_runs", "write_claims", "max_test_length"]
