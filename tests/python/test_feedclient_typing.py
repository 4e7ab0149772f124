"""Type hints and documentation (issue 21): every public function, class
and method of feedclient carries annotations (PEP 484) and the package
ships py.typed (PEP 561); Loader's docstring lists every parameter its
constructor takes, with its default.
"""

import inspect
import pathlib

import feedclient


def public_callables():
    for name in feedclient.__all__:
        obj = getattr(feedclient, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, v in vars(obj).items():
                if attr.startswith("_") and attr not in ("__init__", "__iter__", "__len__",
                                                         "__enter__", "__exit__"):
                    continue
                if isinstance(v, property):
                    v = v.fget
                if inspect.isfunction(v):
                    yield f"{name}.{attr}", v


def test_every_public_callable_is_annotated():
    missing = []
    for name, fn in public_callables():
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        if sig.return_annotation is inspect.Signature.empty or \
                any(p.annotation is inspect.Parameter.empty for p in params):
            missing.append(name)
    assert missing == [], missing


def test_py_typed_ships_with_the_package():
    pkg = pathlib.Path(feedclient.__file__).parent
    assert (pkg / "py.typed").exists()
    src = pathlib.Path(__file__).resolve().parents[2]
    assert 'feedclient = ["py.typed"]' in (src / "client/python/pyproject.toml").read_text()


def test_loader_docstring_lists_every_parameter_with_its_default():
    doc = feedclient.Loader.__doc__
    sig = inspect.signature(feedclient.Loader.__init__)
    head = doc[:doc.index("dataset: a name")]
    for p in list(sig.parameters.values())[1:]:
        shown = p.name if p.default is inspect.Parameter.empty else \
            f"{p.name}={p.default!r}".replace("'", '"')
        assert shown in " ".join(head.split()), shown
        assert p.name in doc[len(head):], p.name          # and described below


def test_public_names_have_docstrings():
    undocumented = [name for name, fn in public_callables()
                    if not (fn.__doc__ or "").strip() and not name.endswith(
                        ("__init__", "__enter__", "__exit__", "__iter__", "__len__"))]
    assert undocumented == [], undocumented
