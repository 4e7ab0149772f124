"""Where a rank sits for node order (Loader(order="node")).

Node order (DESIGN.md "Node-aware order") deals the dataset to nodes and
splits a node's share over its ranks, so it needs every rank's node and
the node count, and it numbers the ranks node after node: rank = node *
ranks_per_node + local_rank. torchrun numbers them so (RANK = GROUP_RANK *
LOCAL_WORLD_SIZE + LOCAL_RANK), and so does Slurm's block distribution
(SLURM_PROCID = SLURM_NODEID * tasks_per_node + SLURM_LOCALID).

placement() reads torchrun's variables when LOCAL_RANK is set (under
`srun torchrun` too: torchrun's describe the ranks), else Slurm's when
SLURM_NODEID is set, else takes the explicit arguments. A rank whose
variables disagree with each other, or with an explicit argument, is
refused with InvalidArgument naming them: a wrong node would read another
node's share, and samples would be lost or doubled across the job.
"""

import os

from .errors import InvalidArgument

__all__ = ["placement"]


def _ints(env, names):
    """{name: int} of the variables of names that are set."""
    got = {}
    for name in names:
        v = env.get(name)
        if v is None or v == "":
            continue
        try:
            got[name] = int(v)
        except ValueError:
            raise InvalidArgument(f"${name}={v!r} is not an integer") from None
    return got


def _need(got, names, launcher):
    missing = [n for n in names if n not in got]
    if missing:
        raise InvalidArgument(f"order='node' under {launcher}: ${', $'.join(missing)} not set")


def _torchrun(env):
    v = _ints(env, ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                    "NODE_RANK", "GROUP_WORLD_SIZE"))
    _need(v, ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"), "torchrun")
    if "GROUP_RANK" not in v and "NODE_RANK" not in v:
        raise InvalidArgument("order='node' under torchrun: neither $GROUP_RANK nor "
                              "$NODE_RANK is set")
    if "GROUP_RANK" in v and "NODE_RANK" in v and v["GROUP_RANK"] != v["NODE_RANK"]:
        raise InvalidArgument(f"node order: GROUP_RANK={v['GROUP_RANK']} and "
                              f"NODE_RANK={v['NODE_RANK']} disagree")
    nname = "GROUP_RANK" if "GROUP_RANK" in v else "NODE_RANK"
    world, per, local, node = v["WORLD_SIZE"], v["LOCAL_WORLD_SIZE"], v["LOCAL_RANK"], v[nname]
    if per < 1 or world % per:
        raise InvalidArgument(f"node order: WORLD_SIZE={world} is not a multiple of "
                              f"LOCAL_WORLD_SIZE={per} (every node needs as many ranks)")
    nodes = world // per
    if "GROUP_WORLD_SIZE" in v and v["GROUP_WORLD_SIZE"] != nodes:
        raise InvalidArgument(f"node order: GROUP_WORLD_SIZE={v['GROUP_WORLD_SIZE']} disagrees "
                              f"with WORLD_SIZE={world} / LOCAL_WORLD_SIZE={per} = {nodes}")
    if not 0 <= local < per:
        raise InvalidArgument(f"node order: LOCAL_RANK={local} is not below "
                              f"LOCAL_WORLD_SIZE={per}")
    if not 0 <= node < nodes:
        raise InvalidArgument(f"node order: {nname}={node} is not below WORLD_SIZE={world} / "
                              f"LOCAL_WORLD_SIZE={per} = {nodes} nodes")
    if v["RANK"] != node * per + local:
        raise InvalidArgument(f"node order: RANK={v['RANK']} disagrees with {nname}={node} * "
                              f"LOCAL_WORLD_SIZE={per} + LOCAL_RANK={local} = "
                              f"{node * per + local}")
    return v["RANK"], world, nodes, node, {
        "rank": "RANK", "world_size": "WORLD_SIZE", "nodes": "WORLD_SIZE / LOCAL_WORLD_SIZE",
        "node": nname}


def _slurm(env):
    v = _ints(env, ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_NNODES",
                    "SLURM_LOCALID"))
    _need(v, ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_NNODES", "SLURM_LOCALID"),
          "Slurm")
    rank, world, node, nodes, local = (v["SLURM_PROCID"], v["SLURM_NTASKS"], v["SLURM_NODEID"],
                                       v["SLURM_NNODES"], v["SLURM_LOCALID"])
    if nodes < 1 or world % nodes:
        raise InvalidArgument(f"node order: SLURM_NTASKS={world} is not a multiple of "
                              f"SLURM_NNODES={nodes} (every node needs as many tasks)")
    per = world // nodes
    if not 0 <= node < nodes:
        raise InvalidArgument(f"node order: SLURM_NODEID={node} is not below "
                              f"SLURM_NNODES={nodes}")
    if not 0 <= local < per:
        raise InvalidArgument(f"node order: SLURM_LOCALID={local} is not below SLURM_NTASKS="
                              f"{world} / SLURM_NNODES={nodes} = {per} tasks per node")
    if rank != node * per + local:
        raise InvalidArgument(f"node order: SLURM_PROCID={rank} disagrees with SLURM_NODEID="
                              f"{node} * {per} tasks per node + SLURM_LOCALID={local} = "
                              f"{node * per + local} (use --distribution=block)")
    return rank, world, nodes, node, {
        "rank": "SLURM_PROCID", "world_size": "SLURM_NTASKS", "nodes": "SLURM_NNODES",
        "node": "SLURM_NODEID"}


def placement(rank=None, world_size=None, nodes=None, node=None, env=None):
    """(rank, world_size, nodes, node) of this process for node order.

    From torchrun's or Slurm's variables (see the module's doc); an
    explicit argument must agree with them. With neither, the arguments:
    rank 0 and world_size 1 by default, nodes 1 by default, node rank //
    (world_size // nodes). Raises InvalidArgument naming what disagrees."""
    env = os.environ if env is None else env
    if env.get("LOCAL_RANK", "") != "":
        got = _torchrun(env)
    elif env.get("SLURM_NODEID", "") != "":
        got = _slurm(env)
    else:
        got = None
    asked = {"rank": rank, "world_size": world_size, "nodes": nodes, "node": node}
    for name, value in asked.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgument(f"{name}: an int is required, not {type(value).__name__}")
    if got is not None:
        r, w, m, k, src = got
        for name, have in zip(("rank", "world_size", "nodes", "node"), (r, w, m, k)):
            if asked[name] is not None and asked[name] != have:
                raise InvalidArgument(f"node order: {name}={asked[name]} disagrees with "
                                      f"{src[name]} = {have}")
        return r, w, m, k
    w = 1 if world_size is None else world_size
    r = 0 if rank is None else rank
    m = 1 if nodes is None else nodes
    if w < 1 or m < 1 or w % m:
        raise InvalidArgument(f"node order: nodes={m} must divide world_size={w}")
    if not 0 <= r < w:
        raise InvalidArgument(f"rank {r} must be below world_size {w}")
    k = r // (w // m)
    if node is not None and node != k:
        raise InvalidArgument(f"node order: node={node} disagrees with rank={r} // "
                              f"(world_size={w} // nodes={m}) = {k} (ranks are numbered "
                              f"node after node)")
    return r, w, m, k
