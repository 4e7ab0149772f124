"""Node order on simulated nodes: one feedd per "node" on a private socket
with its own cache budget, ranks as processes with the variables torchrun
or Slurm set (DESIGN.md "Node-aware order", core/order.h "Node order").

Checks: every sample exactly once per epoch across all ranks (padding's
repeats come from the node's own share); each node's daemon reads only its
share (its cache misses, blocks read, against the blocks of the dataset);
with a fixed deal a second epoch reads nothing more; a resume token taken
on 4 nodes continues on 2 and on 3 nodes with every remaining sample once;
variables that disagree are refused naming them.
"""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import feedclient
from feedclient.nodes import placement
from conftest import PYPKG, pack

N = 2000            # samples of 'nodeset'
BLOCK = 20          # records a block: 100 blocks
NBLOCKS = N // BLOCK
CACHE = 400000      # bytes of each node's block cache: ~70 of the 100 blocks

CHILD = r"""
import json, sys
import feedclient
a = json.loads(sys.argv[1])
out = {"epochs": {}, "state": None}
with feedclient.Loader(a["dataset"], a["batch"], socket=a["sock"], order="node",
                       **a["kw"]) as loader:
    out["rank"], out["world"], out["len"] = loader.rank, loader.world_size, len(loader)
    if a.get("state"):
        loader.load_state_dict({"feedclient": 1, "dataset": a["dataset"],
                                "epoch": a["state_epoch"], "token": bytes.fromhex(a["state"])})
    for e in a["epochs"]:
        if not a.get("state"):
            loader.set_epoch(e)
        got = []
        for i, b in enumerate(loader):
            got.append([b.indices.tolist(), b.padded])
            if a.get("stop") and i + 1 == a["stop"]:
                out["state"] = loader.state_dict()["token"].hex()
                break
        out["epochs"][str(e)] = got
print(json.dumps(out))
"""

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
            "GROUP_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_NNODES",
            "SLURM_LOCALID")


def torchrun_env(node, local, nodes, per):
    return {"RANK": node * per + local, "WORLD_SIZE": nodes * per, "LOCAL_RANK": local,
            "LOCAL_WORLD_SIZE": per, "GROUP_RANK": node}


def slurm_env(node, local, nodes, per):
    return {"SLURM_PROCID": node * per + local, "SLURM_NTASKS": nodes * per,
            "SLURM_NODEID": node, "SLURM_NNODES": nodes, "SLURM_LOCALID": local}


@pytest.fixture(scope="module")
def dataset(feedpack, tmp_path_factory):
    """'nodeset': N samples, label = index, BLOCK records a block."""
    d = tmp_path_factory.mktemp("nodes")
    np.save(d / "image.npy", (np.arange(N * 64) % 251).astype(np.uint8).reshape(N, 8, 8))
    np.save(d / "label.npy", np.arange(N, dtype=np.int64))
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"label={d / 'label.npy'}",
         "--block-records", BLOCK, "-o", d / "nodeset")
    return d / "nodeset"


def start_nodes(feedd_factory, dataset, directory, nodes=4, cache=CACHE):
    """nodes feedds ("nodes") over the dataset, each with its own socket
    and a cache of `cache` bytes."""
    daemons = []
    for k in range(nodes):
        nd = directory / f"node{k}"
        nd.mkdir()
        daemons.append(feedd_factory(nd, "--workers", 1, "--cache-bytes", cache,
                                     "--dataset", f"nodeset={dataset}"))
    return daemons


@pytest.fixture(scope="module")
def cluster(feedd_factory, dataset, tmp_path_factory):
    return start_nodes(feedd_factory, dataset, tmp_path_factory.mktemp("cluster"))


def cache_of(daemon):
    res = subprocess.run([str(daemon.bin / "feedctl"), "--socket", daemon.sock, "status",
                          "--json"], capture_output=True, text=True, check=True)
    return json.loads(res.stdout)["cache"]


def run_job(daemons, nodes, per, env_of=torchrun_env, batch=25, epochs=(0,), kw=None,
            stop=None, state=None, state_epoch=0):
    """Runs nodes * per rank processes at once, node k's on daemons[k];
    returns their outputs by rank."""
    procs = []
    for k in range(nodes):
        for local in range(per):
            env = {n: v for n, v in os.environ.items() if n not in TORCHRUN}
            env.update({n: str(v) for n, v in env_of(k, local, nodes, per).items()})
            env["PYTHONPATH"] = str(PYPKG)
            arg = {"dataset": "nodeset", "batch": batch, "sock": daemons[k].sock,
                   "kw": kw or {}, "epochs": list(epochs), "stop": stop, "state": state,
                   "state_epoch": state_epoch}
            procs.append(subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(arg)],
                                          env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    assert [o["rank"] for o in outs] == list(range(nodes * per))
    return outs


def counts(outs, epoch, per=None):
    """Sample -> times read in epoch (padded batches counted apart), and
    sample -> the nodes that read it."""
    c, where, padded = collections.Counter(), collections.defaultdict(set), collections.Counter()
    for o in outs:
        for idx, pad in o["epochs"][str(epoch)]:
            for x in idx:
                (padded if pad else c)[x] += 1
                if per:
                    where[x].add(o["rank"] // per)
    return c, where, padded


def test_every_sample_once_per_epoch_torchrun(cluster):
    # 4 nodes x 2 ranks, 2000 samples: 250 a rank, no padding; two epochs
    outs = run_job(cluster, 4, 2, epochs=(0, 1))
    shares = []
    for e in (0, 1):
        c, where, padded = counts(outs, e, per=2)
        assert not padded
        assert sorted(c) == list(range(N)) and set(c.values()) == {1}
        assert all(len(w) == 1 for w in where.values())
        shares.append([frozenset(x for x, w in where.items() if k in w) for k in range(4)])
        assert [len(s) for s in shares[-1]] == [N // 4] * 4
    # the deal rotates by default: node 0 holds other samples in epoch 1
    assert shares[0][0] != shares[1][0]
    assert all(len(o["epochs"]["0"]) == 10 and o["len"] == 10 for o in outs)


def test_every_sample_once_slurm_padding_stays_on_node(cluster):
    # 3 nodes x 1 task: shares 666, 667, 667; every rank reads 667 samples,
    # node 0 repeats one of its own
    outs = run_job(cluster, 3, 1, env_of=slurm_env, batch=32)
    c, where, padded = counts(outs, 0, per=1)
    assert sorted(set(c) | set(padded)) == list(range(N))
    assert sum(c.values()) + sum(padded.values()) == 3 * 667
    node_of = {x: min(w) for x, w in where.items()}
    for x, times in (c + padded).items():
        assert times <= 2
        if times == 2:
            assert where[x] == {0}, (x, where[x])
    assert sum(1 for x in node_of if node_of[x] == 0) == 666


def test_each_node_reads_its_share_fixed_deal(feedd_factory, dataset, tmp_path):
    # fixed deal, 2 epochs, fresh daemons: each reads about a quarter of the
    # blocks (whole units, plus at most two split with a neighbour) and the
    # second epoch is served from its cache
    cluster = start_nodes(feedd_factory, dataset, tmp_path)
    before = [cache_of(d) for d in cluster]
    outs = run_job(cluster, 4, 2, epochs=(0, 1), kw={"node_deal": "fixed"})
    after = [cache_of(d) for d in cluster]
    for e in (0, 1):
        c, _, _ = counts(outs, e)
        assert set(c.values()) == {1} and len(c) == N
    for k in range(4):
        misses = after[k]["misses"] - before[k]["misses"]
        hits = after[k]["hits"] - before[k]["hits"]
        assert NBLOCKS // 4 <= misses <= NBLOCKS // 4 + 2, (k, misses)
        assert hits > misses
    # and the same node kept the same share
    _, w0, _ = counts(outs, 0, per=2)
    _, w1, _ = counts(outs, 1, per=2)
    assert w0 == w1


@pytest.mark.parametrize("nodes, per", [(2, 2), (3, 1)])
def test_resume_from_4_nodes(cluster, nodes, per):
    # 4 nodes x 2 ranks read 3 batches of 25 each (600 samples), then the
    # job goes on with other nodes from rank 0's token
    first = run_job(cluster, 4, 2, stop=3)
    tokens = {o["state"] for o in first}
    assert len(tokens) == 1  # every rank stands at the same global position
    c0, _, _ = counts(first, 0)
    assert len(c0) == 600 and set(c0.values()) == {1}
    rest = run_job(cluster, nodes, per, state=tokens.pop(), state_epoch=0, batch=25)
    c1, where, padded = counts(rest, 0, per=per)
    both = c0 + c1 + padded
    # every remaining sample once, but for padding: 1400 left over 3 ranks
    # is 467 each, one repeat (in a batch flagged padded)
    reads = sum(c1.values()) + sum(padded.values())
    assert reads == -(-(N - 600) // (nodes * per)) * nodes * per
    assert sorted(both) == list(range(N))
    repeats = [x for x, n in both.items() if n > 1]
    assert len(repeats) == reads - (N - 600) and all(both[x] == 2 for x in repeats)
    assert all(x in padded and x not in c0 for x in repeats)
    # each new node reads a contiguous piece of the remaining sequence
    assert all(len(w) == 1 for w in where.values())


TORCH_BAD = [
    ({"RANK": 3, "WORLD_SIZE": 4, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 2, "GROUP_RANK": 1},
     ["RANK=3", "GROUP_RANK=1", "LOCAL_WORLD_SIZE=2", "LOCAL_RANK=0"]),
    ({"RANK": 2, "WORLD_SIZE": 4, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 2, "GROUP_RANK": 1,
      "NODE_RANK": 0}, ["GROUP_RANK=1", "NODE_RANK=0"]),
    ({"RANK": 2, "WORLD_SIZE": 5, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 2, "GROUP_RANK": 1},
     ["WORLD_SIZE=5", "LOCAL_WORLD_SIZE=2"]),
    ({"RANK": 2, "WORLD_SIZE": 4, "LOCAL_RANK": 2, "LOCAL_WORLD_SIZE": 2, "GROUP_RANK": 0},
     ["LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"]),
    ({"SLURM_PROCID": 1, "SLURM_NTASKS": 4, "SLURM_NODEID": 1, "SLURM_NNODES": 2,
      "SLURM_LOCALID": 0}, ["SLURM_PROCID=1", "SLURM_NODEID=1", "SLURM_LOCALID=0"]),
    ({"SLURM_PROCID": 1, "SLURM_NTASKS": 3, "SLURM_NODEID": 0, "SLURM_NNODES": 2,
      "SLURM_LOCALID": 1}, ["SLURM_NTASKS=3", "SLURM_NNODES=2"]),
]


@pytest.mark.parametrize("env, names", TORCH_BAD)
def test_disagreeing_variables_refused_naming_them(env, names):
    with pytest.raises(feedclient.InvalidArgument) as ei:
        placement(env={k: str(v) for k, v in env.items()})
    for n in names:
        assert n in str(ei.value), (n, str(ei.value))


def test_placement_sources_and_arguments():
    tr = {k: str(v) for k, v in torchrun_env(2, 1, 4, 3).items()}
    assert placement(env=tr) == (7, 12, 4, 2)
    sl = {k: str(v) for k, v in slurm_env(1, 0, 2, 2).items()}
    assert placement(env=sl) == (2, 4, 2, 1)
    # torchrun under srun: torchrun's variables describe the ranks
    assert placement(env={**sl, **tr}) == (7, 12, 4, 2)
    assert placement(rank=5, world_size=6, nodes=3, env={}) == (5, 6, 3, 2)
    with pytest.raises(feedclient.InvalidArgument, match="nodes=3 disagrees with "
                       "WORLD_SIZE / LOCAL_WORLD_SIZE = 4"):
        placement(nodes=3, env=tr)
    with pytest.raises(feedclient.InvalidArgument, match="node=0 disagrees"):
        placement(rank=5, world_size=6, nodes=3, node=0, env={})


def test_loader_refuses_before_connecting(monkeypatch, tmp_path):
    for k, v in TORCH_BAD[0][0].items():
        monkeypatch.setenv(k, str(v))
    with pytest.raises(feedclient.InvalidArgument, match="RANK=3 disagrees"):
        feedclient.Loader("nodeset", 4, order="node", socket=str(tmp_path / "none.sock"))
    with pytest.raises(feedclient.InvalidArgument, match="order="):
        feedclient.Loader("nodeset", 4, order="nodes", socket=str(tmp_path / "none.sock"))


def test_resume_twice_in_one_epoch(cluster):
    # 4 nodes x 2 ranks read 600 samples; 3 nodes x 1 rank go on from that
    # token and read 300 more; 2 nodes x 2 ranks finish the epoch from the
    # second token (which carries the first change of node count)
    first = run_job(cluster, 4, 2, stop=3)
    second = run_job(cluster, 3, 1, state=first[0]["state"], stop=4)
    assert len({o["state"] for o in second}) == 1
    third = run_job(cluster, 2, 2, state=second[0]["state"])
    c = counts(first, 0)[0] + counts(second, 0)[0]
    assert sum(c.values()) == 900 and set(c.values()) == {1}
    c3, _, padded = counts(third, 0)
    assert not padded and sum(c3.values()) == N - 900  # 1100 over 4 ranks: 275 each
    both = c + c3
    assert sorted(both) == list(range(N)) and set(both.values()) == {1}


def test_restart_after_a_change_of_node_count(feedd_factory, dataset, tmp_path):
    # 2 nodes x 1 rank read 4 batches; one rank on 1 node resumes from that
    # token (a layout over the rest), feedd restarts under it twice, and it
    # still reads every remaining sample once
    daemon = start_nodes(feedd_factory, dataset, tmp_path, nodes=1)[0]
    seen = collections.Counter()
    token = None
    for r in (0, 1):
        with feedclient.Loader("nodeset", 25, socket=daemon.sock, order="node", rank=r,
                               world_size=2, nodes=2) as loader:
            assert loader.rank == r
            for i, b in enumerate(loader):
                seen.update(b.indices.tolist())
                if i == 3:
                    state = loader.state_dict()
                    break
            token = token or state["token"]
            assert state["token"] == token
    assert sum(seen.values()) == 200
    with feedclient.Loader("nodeset", 25, socket=daemon.sock, order="node",
                           reconnect_s=120, rank=0, world_size=1, nodes=1) as loader:
        loader.load_state_dict(state)
        for i, b in enumerate(loader):
            seen.update(b.indices.tolist())
            del b
            if i in (5, 40):
                daemon.kill()
                daemon.start()
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}


def test_open_notes_a_cache_smaller_than_the_share(feedd_factory, dataset, tmp_path, cluster):
    # 2000 samples of 72 bytes decoded: a node's quarter is 36000 bytes
    daemon = start_nodes(feedd_factory, dataset, tmp_path, nodes=1, cache=20000)[0]
    with feedclient.Loader("nodeset", 25, socket=daemon.sock, order="node", rank=0,
                           world_size=4, nodes=4) as loader:
        assert "node order" in loader.note and "cache_bytes" in loader.note, loader.note
    with feedclient.Loader("nodeset", 25, socket=daemon.sock, order="node", rank=0,
                           world_size=1) as loader:
        assert "node order" in loader.note  # one node: the whole dataset
    with feedclient.Loader("nodeset", 25, socket=cluster[0].sock, order="node", rank=0,
                           world_size=4, nodes=4) as loader:
        assert loader.note == ""  # CACHE holds a quarter


from test_feedclient_bad_samples import PIPE, bad_set  # noqa: E402,F401  (the fixture)


def test_skip_replaces_inside_the_node_share(bad_set):
    # 2 nodes x 1 rank over the ImageFolder set with 3 samples that do not
    # decode: no bad sample is served, every good one is, and each
    # replacement (like the padding) repeats a sample of the same node
    reads = []
    for r in (0, 1):
        with feedclient.Loader("bad", 5, socket=bad_set.daemons[1].sock, pipeline=PIPE,
                               on_error="skip", max_bad=10, order="node", rank=r,
                               world_size=2, nodes=2) as loader:
            reads.append(collections.Counter(x for b in loader for x in b.indices.tolist()))
    good = set(range(bad_set.n)) - bad_set.bad
    assert not (set(reads[0]) | set(reads[1])) & bad_set.bad
    assert set(reads[0]) | set(reads[1]) == good
    assert not set(reads[0]) & set(reads[1])  # the shares are disjoint
    extra = sum(reads[0].values()) + sum(reads[1].values()) - len(good)
    assert extra == len(bad_set.bad) + (-(-bad_set.n // 2) * 2 - bad_set.n)
