"""``lengen bench``: score model variants across the four papers' task families beside the
built-in baselines. The battery (cells, scales, fit rules, scores, the protocol's seeds and
learning-rate grid) is :mod:`.battery`; running a bench is :mod:`.run`; the statistics are
:mod:`.stats`; the card is :mod:`.scorecard`; ``lengen sweep`` (any comparison over seeds with
the same statistics) is :mod:`.seeds`; the fit search of unfitted pairs is :mod:`.fit_search`;
the card folder a contributor sends (``lengen bench --export``) is :mod:`.export`."""
