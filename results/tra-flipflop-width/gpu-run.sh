# How the width-scale table was run on the lent GPU (one H100, 2026-11-24): one invocation per seed,
# nine workers sharing the GPU, each wave's run folders (weights left out) archived to $OUT as it ends.
# Run from the repository root: SEEDS='0 1' bash results/tra-flipflop-width/gpu-run.sh (OUT=... set).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
O=runs/tra-flipflop-width; T0=$(date +%s); LIM=${LIM:-555}
git rev-parse HEAD > $OUT/commit.txt 2>/dev/null; git diff --stat >> $OUT/commit.txt 2>/dev/null
for s in ${SEEDS:-0 1 2}; do
  left=$(( LIM - ($(date +%s) - T0) )); [ $left -lt 60 ] && break
  timeout $left python3 -m lengen.cli reproduce tra-flipflop --scale width --seeds $s --workers 9 --threads 1 --device cuda --out $O > $OUT/wave$s.log 2>&1
  echo "seed $s rc=$? at $(( $(date +%s) - T0 )) s" | tee -a $OUT/waves.txt
  tar czf $OUT/width.tgz --exclude=checkpoints --exclude='*.safetensors' --exclude=.lock $O
done
for f in $OUT/wave*.log; do tail -n 4 $f; done
