"""Position samplers with a module of their own (the registry is ``lengen.positions.SAMPLERS``):
the interface (:mod:`~lengen.samplers.base`), position interpolation per test length
(:mod:`~lengen.samplers.interpolate`), head / tail index warping (:mod:`~lengen.samplers.warp`)
and its skew functions (:mod:`~lengen.samplers.skew`)."""
