"""``lengen reproduce tra-wikitext``: the TRA paper's Appendix B (see :mod:`.recipe` for the
protocol and scales, :mod:`.published` for the paper's numbers, :mod:`.report` for the tables and
figure, :mod:`.cli` for the command-line arguments)."""
from lengen.recipes.tra_wikitext.recipe import *  # noqa: F401,F403  (the recipe's public API)
from lengen.recipes.tra_wikitext.recipe import __all__  # noqa: F401
