"""The PushT score's sensitivity test with the block's error alone: the agent, lost in the imagined frames,
counts the frame's diagonal in the harness's error and hides what the block does.

    python benchmarks/pusht_block_sensitivity.py > benchmarks/pusht_block_sensitivity.txt   # 2-core CPU, ~7 min
"""

import json

import gymnasium as gym
import torch

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.world import harness
from cosmos3_gym.world.pusht import PUSHT_CHECKPOINT, checkpoint_action_frame
from cosmos3_gym.world.pusht_eval import block_mass_error, pusht_harness_kwargs

torch.set_num_threads(1)
model = Cosmos3Model.from_pretrained(PUSHT_CHECKPOINT, device="cpu")
kwargs = {**pusht_harness_kwargs(), "error_fn": block_mass_error}
dream = gym.make("Cosmos3PushT-v0", num_steps=4, horizon=8, model=model,
                 action_frame=checkpoint_action_frame(PUSHT_CHECKPOINT))
truth = gym.make("PushT-Twin-v0", horizon=8)
record = harness.action_sensitivity(dream, truth, list(range(10)), seed=0, **kwargs)
out = {key: record[key] for key in ("ratio", "zero_ratio", "median_error", "mean_error", "pairs", "lost")}
out["metrics"] = {name: metric["mean"] for name, metric in record["metrics"].items()}
out["per_step_median"] = {c: record["per_step"][c]["median"] for c in ("true", "shuffled", "zero")}
out["metric_per_step"] = {name: metric["per_step"]["mean"] for name, metric in record["metrics"].items()}
print(json.dumps(out, indent=1))
