"""Ranks: processes started with torchrun's RANK/WORLD_SIZE (or Slurm's
variables) split an epoch exactly as torch's DistributedSampler does.

Each rank runs in a process of its own, all at once, with only the
environment telling it its share. In sequential order every rank's batches
hold the very indices DistributedSampler(shuffle=False) gives that rank,
cut into batches as DataLoader cuts them (the share padded by wrap-around
to equal counts, the last batch partial; or with drop_last, each share cut
to whole batches). Shuffled, the counts are the same and the ranks
together cover every sample, the padding's repeats aside.
"""

import collections
import json
import os
import subprocess
import sys

import pytest

import feedclient
from conftest import N_SMALL, PYPKG

CHILD = r"""
import json, sys
import feedclient
name, batch, sock, kw = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
with feedclient.Loader(name, batch, socket=sock, **kw) as loader:
    out = {"rank": loader.rank, "world": loader.world_size, "len": len(loader),
           "batches": [b.indices.tolist() for b in loader]}
print(json.dumps(out))
"""


def run_ranks(fc, dataset, batch, world, env_names=("RANK", "WORLD_SIZE"), **kw):
    """Runs world processes at once, rank r with env_names set to (r, world);
    returns their outputs by rank."""
    procs = []
    for r in range(world):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
        env.update({env_names[0]: str(r), env_names[1]: str(world),
                    "PYTHONPATH": str(PYPKG)})
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, dataset, str(batch),
                                       fc.sock, json.dumps(kw)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    assert [(o["rank"], o["world"]) for o in outs] == [(r, world) for r in range(world)]
    return outs


def distributed_sampler_batches(n, batch, world, rank, drop_last):
    import torch
    data = torch.utils.data
    sampler = data.DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False,
                                      drop_last=drop_last)
    loader = data.DataLoader(range(n), batch_size=batch, sampler=sampler, drop_last=drop_last)
    return [b.tolist() for b in loader], len(loader)


@pytest.mark.parametrize("dataset, n, batch, world", [
    ("kinds", 37, 5, 2),          # 37 over 2 ranks: one repeat
    ("small", N_SMALL, 64, 3),    # 1000 over 3 ranks: two repeats
    ("small", N_SMALL, 100, 2),
])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_ranks_are_distributed_samplers(fc, dataset, n, batch, world, drop_last):
    pytest.importorskip("torch")
    outs = run_ranks(fc, dataset, batch, world, shuffle=False, drop_last=drop_last)
    for o in outs:
        want, want_len = distributed_sampler_batches(n, batch, world, o["rank"], drop_last)
        assert o["batches"] == want, o["rank"]
        assert o["len"] == want_len


@pytest.mark.parametrize("world", [2, 3])
def test_shuffled_ranks_cover_the_epoch(fc, world):
    pytest.importorskip("torch")
    outs = run_ranks(fc, "kinds", 4, world, seed=11)
    n = 37
    per_rank = -(-n // world)
    seen = collections.Counter()
    for o in outs:
        want, want_len = distributed_sampler_batches(n, 4, world, o["rank"], False)
        assert [len(b) for b in o["batches"]] == [len(b) for b in want]
        assert o["len"] == want_len
        idx = [i for b in o["batches"] for i in b]
        assert len(idx) == per_rank
        seen.update(idx)
    assert set(seen) == set(range(n))
    assert sum(seen.values()) - n == per_rank * world - n      # the padding's repeats


def test_pad_last_counts(fc):
    outs = run_ranks(fc, "kinds", 5, 2, shuffle=False, pad_last=True)
    for o in outs:
        assert [len(b) for b in o["batches"]] == [5] * 4   # 19 a rank, the last batch filled
        assert o["len"] == 4


def test_slurm_variables(fc):
    outs = run_ranks(fc, "kinds", 5, 2, env_names=("SLURM_PROCID", "SLURM_NTASKS"),
                     shuffle=False)
    for o in outs:
        want, _ = distributed_sampler_batches(37, 5, 2, o["rank"], False)
        assert o["batches"] == want


def test_rank_defaults(fc, monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)

    def share(**kw):
        with feedclient.Loader("kinds", 5, socket=fc.sock, **kw) as loader:
            return loader.rank, loader.world_size

    assert share() == (0, 1)
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert share() == (2, 4)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert share() == (1, 3)                      # torchrun's first
    assert share(rank=0, world_size=1) == (0, 1)  # arguments above both
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(feedclient.InvalidArgument, match=r"\$RANK='x'"):
        share()
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(feedclient.InvalidArgument, match=r"\$RANK=3 must be below \$WORLD_SIZE=3"):
        share()
