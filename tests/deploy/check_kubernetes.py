#!/usr/bin/python3
"""check_kubernetes.py SRC BUILD: deploy/kubernetes/ is valid and fits together.

1. Renders the kustomization with a small resolver of its own (resources,
   namespace, configMapGenerator from files with disableNameSuffixHash: all
   that kustomization.yaml uses; anything else in it is an error here), and
   with `kubectl kustomize` too where kubectl is installed (Debian 12's
   kubernetes-client cannot be installed beside other kubectl packages, so
   it is not required): both must give the same objects and ConfigMap data.
2. Checks what the issue asks of the manifests: the DaemonSet runs non-root
   on a read-only root file system, takes the socket directory, cache and
   datasets from host paths, sees GPUs through NVIDIA's runtime without
   requesting one, has requests and limits, and its config is the
   ConfigMap; the PodMonitor selects its pods and names a port they have;
   the trainer Pod mounts the socket's directory and runs in the socket's
   group; feedd --check-config accepts the ConfigMap's feedd.yaml.
3. Validates every manifest and the rendering against the Kubernetes
   schemas with kubernetes-validate (PyPI, in a venv under BUILD made
   here); exits 77 (ctest: skipped) naming why when PyPI cannot be reached.
   The PodMonitor (a CRD the schemas lack) is covered by the checks of 2.
"""

import pathlib
import shutil
import subprocess
import sys
import venv

import yaml

SKIP = 77


def fail(msg):
    print(f"check_kubernetes: {msg}", file=sys.stderr)
    sys.exit(1)


def load_all(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render(kdir):
    """The kustomization's objects, as kustomize would build them."""
    k = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator"}
    if set(k) - known:
        fail(f"kustomization.yaml uses {sorted(set(k) - known)}: teach render() them")
    ns = k.get("namespace")
    out = []
    for res in k.get("resources", []):
        for doc in load_all(kdir / res):
            if ns and doc["kind"] != "Namespace":
                doc["metadata"]["namespace"] = ns
            out.append(doc)
    for gen in k.get("configMapGenerator", []):
        if not gen.get("options", {}).get("disableNameSuffixHash"):
            fail(f"configMapGenerator {gen['name']}: a hash suffix is not rendered here")
        data = {pathlib.Path(f).name: (kdir / f).read_text() for f in gen.get("files", [])}
        meta = {"name": gen["name"]}
        if ns:
            meta["namespace"] = ns
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return out


def key(doc):
    m = doc["metadata"]
    return (doc["kind"], m.get("namespace", ""), m["name"])


def compare_with_kubectl(kdir, ours):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("check_kubernetes: no kubectl here: rendered with the resolver only")
        return
    res = subprocess.run([kubectl, "kustomize", str(kdir)], capture_output=True, text=True,
                         timeout=120)
    if res.returncode != 0:
        fail(f"kubectl kustomize: {res.stderr}")
    theirs = {key(d): d for d in yaml.safe_load_all(res.stdout) if d}
    mine = {key(d): d for d in ours}
    if set(theirs) != set(mine):
        fail(f"kubectl renders {sorted(theirs)}, the resolver {sorted(mine)}")
    for k, d in mine.items():
        if d["kind"] == "ConfigMap" and d["data"] != theirs[k]["data"]:
            fail(f"{k}: data differs from kubectl's")
        if d.get("spec") != theirs[k].get("spec"):
            fail(f"{k}: spec differs from kubectl's")
    print(f"check_kubernetes: kubectl kustomize renders the same {len(mine)} objects")


def only(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    if len(found) != 1:
        fail(f"expected one {kind}, found {len(found)}")
    return found[0]


def check_daemonset(objs, build):
    ds = only(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    feedd = next((c for c in pod["containers"] if c["name"] == "feedd"), None) or \
        fail("the DaemonSet has no container named feedd")
    sc = pod.get("securityContext", {})
    if not sc.get("runAsNonRoot") or not sc.get("runAsUser"):
        fail("the DaemonSet must run non-root (runAsNonRoot, a numeric runAsUser)")
    for c in pod["containers"]:
        csc = c.get("securityContext", {})
        if not csc.get("readOnlyRootFilesystem") or csc.get("allowPrivilegeEscalation") is not False:
            fail(f"container {c['name']}: read-only root file system, no privilege escalation")
        r = c.get("resources", {})
        if "memory" not in r.get("requests", {}) or "memory" not in r.get("limits", {}):
            fail(f"container {c['name']}: memory requests and limits")
        for part in ("requests", "limits"):
            if any(k.startswith("nvidia.com/") for k in r.get(part, {})):
                fail(f"container {c['name']} requests a GPU: it would take one from trainers")
    env = {e["name"]: e.get("value") for e in feedd.get("env", [])}
    if env.get("NVIDIA_VISIBLE_DEVICES") != "all" or pod.get("runtimeClassName") != "nvidia":
        fail("GPUs are made visible through NVIDIA's runtime (runtimeClassName nvidia, "
             "NVIDIA_VISIBLE_DEVICES=all)")
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in feedd["volumeMounts"]}
    cfg_path = feedd["command"][feedd["command"].index("--config") + 1]
    cfg_vol = vols[mounts[str(pathlib.Path(cfg_path).parent)]]
    cm = only(objs, "ConfigMap")
    if cfg_vol.get("configMap", {}).get("name") != cm["metadata"]["name"]:
        fail(f"{cfg_path} is not the ConfigMap {cm['metadata']['name']}")
    conf = yaml.safe_load(cm["data"][pathlib.Path(cfg_path).name])
    for path, what in ((str(pathlib.Path(conf["socket"]).parent), "the socket's directory"),
                       (conf["cache_dir"], "cache_dir")):
        if path not in mounts or "hostPath" not in vols[mounts[path]]:
            fail(f"{what} {path} must be a hostPath volume")
    for d in conf["datasets"]:
        if not d["path"].startswith(("http://", "https://", "s3://")) and \
           not any(d["path"].startswith(p + "/") and "hostPath" in vols[n]
                   for p, n in mounts.items()):
            fail(f"dataset {d['name']}: {d['path']} is on no hostPath volume")
    ports = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}
    if int(conf["metrics"].rsplit(":", 1)[1]) not in ports.values():
        fail(f"metrics {conf['metrics']}: no container port")
    check_config(cm, cfg_path, build)
    return ds, conf, ports


def check_config(cm, cfg_path, build):
    """feedd --check-config on the ConfigMap's file: no error (a dataset
    missing on this machine is a warning)."""
    tmp = build / "kubernetes-check"
    tmp.mkdir(exist_ok=True)
    f = tmp / pathlib.Path(cfg_path).name
    f.write_text(cm["data"][f.name])
    res = subprocess.run([str(build / "bin" / "feedd"), "--check-config", str(f)],
                         capture_output=True, text=True, timeout=60)
    errors = [ln for ln in (res.stdout + res.stderr).splitlines() if ": error:" in ln]
    if res.returncode != 0 or errors:
        fail(f"feedd --check-config {f}: {res.stdout}{res.stderr}")


def check_podmonitor(objs, ds, ports):
    pm = only(objs, "PodMonitor")
    if pm["apiVersion"] != "monitoring.coreos.com/v1":
        fail(f"PodMonitor apiVersion {pm['apiVersion']}")
    want = pm["spec"]["selector"]["matchLabels"]
    have = ds["spec"]["template"]["metadata"]["labels"]
    if any(have.get(k) != v for k, v in want.items()):
        fail(f"the PodMonitor selects {want}, the DaemonSet's pods have {have}")
    if pm["metadata"].get("namespace") != ds["metadata"].get("namespace"):
        fail("the PodMonitor is not in the DaemonSet's namespace")
    for ep in pm["spec"]["podMetricsEndpoints"]:
        if ep.get("port") not in ports:
            fail(f"PodMonitor endpoint port {ep.get('port')}: the pods have {sorted(ports)}")
        if ep.get("path", "/metrics") != "/metrics":
            fail(f"PodMonitor path {ep['path']}: feedd serves /metrics")


def check_trainer(kdir, conf):
    (pod,) = load_all(kdir / "trainer-pod.yaml")
    spec = pod["spec"]
    sockdir = str(pathlib.Path(conf["socket"]).parent)
    vols = {v["name"]: v for v in spec["volumes"]}
    c = spec["containers"][0]
    mounted = [m for m in c["volumeMounts"] if m["mountPath"] == sockdir]
    if not mounted or vols[mounted[0]["name"]].get("hostPath", {}).get("path") != sockdir:
        fail(f"the trainer Pod must mount the host's {sockdir}")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    if env.get("FEEDD_SOCKET") != conf["socket"]:
        fail(f"the trainer's FEEDD_SOCKET is not {conf['socket']}")
    if int(conf["socket_group"]) not in spec.get("securityContext", {}).get("supplementalGroups", []):
        fail(f"the trainer Pod must run in the socket's group {conf['socket_group']}")


def validator(build):
    """kubernetes-validate in a venv under build; None (and why) when PyPI
    cannot be reached."""
    env = build / "kubernetes-validate-venv"
    exe = env / "bin" / "kubernetes-validate"
    if exe.exists():
        return exe, None
    venv.EnvBuilder(with_pip=True, clear=True).create(env)
    res = subprocess.run([str(env / "bin" / "pip"), "install", "-q", "--timeout", "20",
                          "kubernetes-validate"], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        shutil.rmtree(env, ignore_errors=True)
        return None, f"pip install kubernetes-validate failed (PyPI unreachable?): " \
                     f"{res.stderr.strip().splitlines()[-1:]}"
    return exe, None


def validate(kdir, objs, build):
    exe, why = validator(build)
    if not exe:
        print(f"check_kubernetes: SKIPPED schema validation: {why}")
        sys.exit(SKIP)
    rendered = build / "kubernetes-check" / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(objs))
    files = [str(p) for p in sorted(kdir.glob("*.yaml")) if p.name not in
             ("kustomization.yaml", "feedd.yaml")] + [str(rendered)]
    res = subprocess.run([str(exe), "--strict", *files], capture_output=True, text=True,
                         timeout=300)
    out = (res.stdout + res.stderr).splitlines()
    print("\n".join(out))
    bad = [ln for ln in out if ln.startswith(("ERROR", "WARN")) and
           "Couldn't find schema for kind PodMonitor" not in ln]
    if res.returncode != 0 or bad:
        fail("kubernetes-validate: " + "; ".join(bad or out))
    passed = sum(1 for ln in out if " passed for resource " in ln)
    if passed < len(files):
        fail(f"only {passed} resources validated")


def main():
    src, build = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    kdir = src / "deploy" / "kubernetes"
    (build / "kubernetes-check").mkdir(parents=True, exist_ok=True)
    objs = render(kdir)
    compare_with_kubectl(kdir, objs)
    ds, conf, ports = check_daemonset(objs, build)
    check_podmonitor(objs, ds, ports)
    check_trainer(kdir, conf)
    for f in ("Containerfile", "reload-on-change"):
        if not (kdir / f).exists():
            fail(f"{f} missing")
    print("check_kubernetes: manifests fit together")
    validate(kdir, objs, build)
    print("check_kubernetes: every manifest valid")


if __name__ == "__main__":
    main()
