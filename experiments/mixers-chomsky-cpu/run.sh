#!/bin/bash
# The runs behind results/mixers-chomsky-cpu (run from the repository root; about 20 min on
# the 2-core machine with 2 workers). OUT: where the run folders go (default runs/mixers-chomsky).
set -e
OUT=${OUT:-runs/mixers-chomsky}
C=experiments/mixers-chomsky-cpu/config.yaml
S="--seeds 0 1 2 --workers 2 --threads 1"
# parity: Gated DeltaNet with beta in [0, 1] and in [0, 2] (negative eigenvalues, Grazzi et al.
# 2025), then LSTM and Mamba-2
lengen sweep --config $C model.attention=gated_deltanet \
  model.attention_kwargs.allow_neg_eigval=false,true $S --out $OUT/parity-gdn
lengen sweep --config $C model.attention=lstm,mamba2 $S --out $OUT/parity
# even pairs (a bench cell's task): the three mixers at their defaults
lengen sweep --config $C task.name=even_pairs model.attention=lstm,mamba2,gated_deltanet $S \
  --out $OUT/even_pairs
