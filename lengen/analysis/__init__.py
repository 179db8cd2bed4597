"""Analysis of finished runs: tables over seeds (:mod:`lengen.analysis.tables`) and attention
heatmaps (:mod:`lengen.analysis.heatmap`). Reads run directories and rows; never trains.
Submodules are imported on use so ``import lengen`` stays free of Matplotlib."""
