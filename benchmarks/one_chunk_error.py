"""One imagined chunk against the truth, from the same true frame: the error of the object's centre at
the chunk's last frame (px of the 32x32 frame), and its mean component toward the goal (a dream that
runs ahead of slow pushes would show a positive bias) and across it. 48 tasks (seeds 2000-2047) per
command kind: 0.15 and 0.5 of the greedy command, greedy plus Gaussian noise 1 (the harness's
"greedy noise 1"), and zero commands; the shipped weights and the checkpoints named.

Usage: python benchmarks/one_chunk_error.py [CHECKPOINT ...]   (about 1.5 minutes on a 2-core CPU)
"""
import numpy as np, torch, sys
from cosmos3_gym.world import envs as E
from cosmos3_gym.rollout import procedural_world as pw
torch.set_num_threads(2)
N = 16
for ck in ["", *sys.argv[1:]]:  # the shipped weights, then the checkpoints named
    imag = E.Cosmos3WorldVectorEnv(N, device="cpu", checkpoint=ck)
    for gain, noise in [(0.15, 0), (0.5, 0), (1.0, 1.0), (0.0, 0.0)]:
        along, across, err = [], [], []
        for rep in range(3):
            seeds = 2000 + rep * N
            obs, info = imag.reset(seed=seeds)
            acts, tr = [], []
            for i in range(N):
                true = E.ProceduralWorldEnv(); true.reset(seed=seeds + i)
                rng = np.random.default_rng(i + 7 * rep)
                h = np.array(pw.GOALS[true.task.goal]) * 32 - np.array(true.task.start)
                c = np.clip(gain * np.tile(h / (pw.MAX_SPEED * 8), (8, 1)) + rng.normal(0, noise, (8, 2)) * (noise > 0), -1, 1).astype(np.float32)
                acts.append(c); tr.append((true.step(c), h / np.linalg.norm(h), pw.locate(obs[i])))
            o2, r, term, trunc, inf2 = imag.step(np.stack(acts))
            for i in range(N):
                (_, _, _, _, ti), u, s0 = tr[i]
                a = pw.locate(inf2["frames"][i][-1]); b = pw.locate(ti["frames"][-1])
                d = (np.array(a) - np.array(b)) * 32
                along.append(d @ u); across.append(d @ np.array([-u[1], u[0]])); err.append(np.linalg.norm(d))
        print(ck or "ship", "gain", gain, "noise", noise, "toward-goal bias %.2f +- %.2f, across %.2f, median err %.2f" % (np.mean(along), np.std(along) / np.sqrt(len(along)), np.mean(across), np.median(err)), flush=True)
