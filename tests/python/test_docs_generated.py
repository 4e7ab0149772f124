"""scripts/gen-docs and the tables feedd prints for it (issue 34 item 6).

The ctest `docs_generated` runs `gen-docs --check` on the committed docs;
these tests show that the check fails as it should (a changed line of a
region, a region removed) and names the file, the table and the line, that
writing the regions fixes them, and that `--list-config-keys` lists exactly
the keys a config file may hold.
"""

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import SRC

GEN = SRC / "scripts" / "gen-docs"
DOCS = ["README.md", "daemon/README.md", "man/feedd.8", "man/feedd.yaml.5"]


def list_table(feed_bin, flag):
    """feedd FLAG's rows, split at tabs."""
    res = subprocess.run([str(feed_bin / "feedd"), flag], capture_output=True, text=True,
                         check=True)
    return [line.split("\t") for line in res.stdout.splitlines()]


def gen(feed_bin, root, *args):
    return subprocess.run([sys.executable, str(GEN), str(feed_bin), "--root", str(root), *args],
                          capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path):
    """A copy of the documents gen-docs writes, as committed."""
    for rel in DOCS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SRC / rel, tmp_path / rel)
    return tmp_path


def test_committed_docs_are_current(feed_bin, tree):
    res = gen(feed_bin, tree, "--check")
    assert res.returncode == 0, res.stdout + res.stderr


def test_check_names_file_table_and_line(feed_bin, tree):
    readme = tree / "README.md"
    lines = readme.read_text().split("\n")
    at = lines.index("<!-- generated: config-keys -->") + 4  # a row of the table
    assert lines[at].startswith("| `")
    lines[at] = lines[at].replace("| restart |", "| reload |")  # socket_group's, by hand
    readme.write_text("\n".join(lines))
    res = gen(feed_bin, tree, "--check")
    assert res.returncode == 1
    assert f"README.md: table 'config-keys' (--list-config-keys) differs at line {at + 1}" \
        in res.stdout, res.stdout
    assert lines[at] in res.stdout
    assert gen(feed_bin, tree).returncode == 0  # writing the regions mends it
    assert readme.read_text() == (SRC / "README.md").read_text()
    assert gen(feed_bin, tree, "--check").returncode == 0


def test_check_fails_on_a_missing_region(feed_bin, tree):
    page = tree / "man" / "feedd.8"
    page.write_text(page.read_text().replace('.\\" end generated: ops\n', ""))
    res = gen(feed_bin, tree, "--check")
    assert res.returncode != 0
    assert "man/feedd.8" in res.stderr and "'ops'" in res.stderr, res.stderr


def test_write_leaves_the_rest_of_a_file(feed_bin, tree):
    page = tree / "man" / "feedd.yaml.5"
    text = page.read_text()
    begin = text.index('.\\" generated: config-keys\n') + len('.\\" generated: config-keys\n')
    end = text.index('.\\" end generated: config-keys')
    page.write_text(text[:begin] + text[end:])  # the region emptied
    assert gen(feed_bin, tree, "--check").returncode == 1
    assert gen(feed_bin, tree).returncode == 0
    assert page.read_text() == text


def test_config_keys_are_the_schema(feed_bin, tmp_path):
    """Every key listed is one a file may hold (feedd --check-config reports
    no unknown key), and every key of configs/feedd.yaml is listed."""
    rows = list_table(feed_bin, "--list-config-keys")
    assert all(len(r) == 5 and r[4] in ("reload", "restart") for r in rows), rows
    keys = [r[0] for r in rows]
    doc = {}
    for key in keys:  # "mixtures[].sources[].weight": a list of one mapping at each []
        node = doc
        *path, leaf = re.findall(r"[a-z0-9_]+(?:\[\])?", key)
        for part in path:
            if part.endswith("[]"):
                node = node.setdefault(part[:-2], [{}])[0]
            else:
                node = node.setdefault(part, {})
        node[leaf] = "x"
    yaml = json.dumps(doc)  # JSON is YAML's flow style
    cfg = tmp_path / "all.yaml"
    cfg.write_text(yaml)
    res = subprocess.run([str(feed_bin / "feedd"), "--check-config", str(cfg)],
                         capture_output=True, text=True)
    assert res.returncode != 0  # "x" is no valid value; the keys are what is checked
    assert "unknown key" not in res.stdout + res.stderr, res.stdout + res.stderr
    # the keys of the shipped file, set or commented out (as check_man.sh reads them)
    shipped = re.findall(r"^(?:# *)?(?:- )?([a-z_]+):", (SRC / "configs" / "feedd.yaml")
                         .read_text(), flags=re.M)
    leaves = {re.split(r"[.\]]", k)[-1] for k in keys}
    containers = {"limits", "datasets", "pipelines", "mixtures", "sources"}
    assert len(set(shipped)) >= 10
    for word in set(shipped) - containers:
        assert word in leaves, f"configs/feedd.yaml's {word}: not in --list-config-keys"
