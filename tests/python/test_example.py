# SPDX-License-Identifier: MIT
"""examples/train_imagenet.py on CPU: trains, checkpoints mid-epoch with the
loader state, and --resume finishes the run with the steps that were left."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_imagenet.py"


def train(args, cwd, env):
    proc = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("with_index", [True, False], ids=["index", "no-options"])
def test_train_checkpoint_and_resume_mid_epoch(even_shards, stoker_bin, clean_env_factory,
                                               tmp_path, with_index):
    env = clean_env_factory()
    index = tmp_path / "index.json"
    subprocess.run([stoker_bin, "index", "-o", str(index), *even_shards], check=True,
                   capture_output=True, timeout=60)
    # Without --index or --samples the loader is given nothing but URLs.
    data = ["--index", str(index)] if with_index else []
    common = ["--data", ",".join(even_shards), *data, "--model", "resnet18",
              "--image-size", "32", "--batch-size", "4", "--epochs", "2",
              "--cpu", "--checkpoint", str(tmp_path / "ckpt.pt"), "--threads", "1"]
    first = train([*common, "--max-steps", "3"], tmp_path, env)
    assert "stopped at step 3 (epoch 0, batch 3)" in first
    rest = train([*common, "--resume"], tmp_path, env)
    steps = [int(m) for m in re.findall(r"epoch \d+: step (\d+)", rest)]
    # Both epochs end where an uninterrupted run ends: len(loader) steps each.
    per_epoch = steps[1] - steps[0]
    assert per_epoch > 3 and steps == [per_epoch, 2 * per_epoch]
    # each epoch ends with the loader's report
    assert len(re.findall(r"^(?:not )?input-bound: the caller waited", rest, re.M)) == 2, rest
    assert rest.count("verdict: ") == 2, rest


def test_classes_len_and_validation_as_the_reference(even_shards, uneven_shards,
                                                     clean_env_factory, tmp_path):
    """No --classes, --samples or --index: the classes come from classes.txt
    beside the shards, len() from the loader itself, and --val-data
    evaluates every validation sample once."""
    data = tmp_path / "data"
    data.mkdir()
    for shard in even_shards:
        (data / Path(shard).name).symlink_to(shard)
    (data / "classes.txt").write_text("".join(f"class{i}\n" for i in range(999)))
    out = train(["--data", ",".join(str(data / Path(s).name) for s in even_shards),
                 "--val-data", ",".join(uneven_shards), "--model", "resnet18",
                 "--image-size", "32", "--batch-size", "8", "--epochs", "1", "--cpu",
                 "--print-every", "5", "--checkpoint", str(tmp_path / "ckpt.pt"),
                 "--threads", "1"], tmp_path, clean_env_factory())
    assert "resnet18, 999 classes, 15 steps per epoch" in out, out
    assert "epoch 0 [5/15]" in out and "epoch 0 [15/15]" in out, out
    assert re.search(r"epoch 0: validation accuracy \d\.\d{4} over 120 samples", out), out
