"""The documentation that is generated from the code matches the code."""

import ast
import glob
import os
import re

from sebulba import config_docs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_config_key_has_a_meaning():
    assert config_docs.undocumented_keys() == []


def test_configuration_docs_are_in_sync_with_the_configs():
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        documented = f.read()
    assert documented == config_docs.render(), (
        "docs/configuration.md is stale: run "
        "`python -m sebulba.config_docs > docs/configuration.md`"
    )


def test_every_key_of_every_config_is_listed():
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        documented = f.read()
    for path in config_docs.config_files():
        _, config = config_docs.load_config(path)
        section = documented.split(f"## `configs/{os.path.basename(path)}`", 1)[1]
        section = section.split("\n## ", 1)[0]
        for key in config_docs.flatten(config.to_dict()):
            assert f"| `{key}` |" in section, (path, key)


def _project_texts():
    """(path, text) of every document and source file a user of the project reads."""
    patterns = ["README.md", "setup.py", "tpu.sh", "slurm/*", "docs/*.md"]
    patterns += [f"{d}/**/*.py" for d in ("sebulba", "configs", "tests", "benchmarks")]
    this_file = os.path.abspath(__file__)
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            if os.path.isfile(path) and os.path.abspath(path) != this_file:
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, ROOT), f.read()


def test_the_docs_cite_nothing_outside_the_project():
    outside = re.compile(r"\b(?:DESIGN|STYLE)\.md\b|\.\./shared\b")
    cited = [(path, m.group(0)) for path, text in _project_texts() for m in outside.finditer(text)]
    assert cited == []


def _documents():
    for path in ["README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT))]:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            yield path, f.read()


def test_every_evaluate_flag_the_docs_name_exists():
    from absl import flags

    from sebulba import evaluate  # noqa: F401 - defines the flags.

    named = set()
    for _, text in _documents():
        # A usage line and its continuation lines, or a table row, that runs evaluate.
        for match in re.finditer(r"sebulba\.evaluate[^\n]*(?:\n {10,}[^\n]*)*", text):
            named.update(re.findall(r"--(\w+)", match.group(0)))
    assert {"workdir", "checkpoint", "episodes"} <= named
    assert [name for name in sorted(named) if name not in flags.FLAGS] == []
    # The checkpoint is chosen by its update number, in every place that names it.
    placeholder = re.compile(r"--checkpoint=([A-Z]+)")
    placeholders = {m for _, text in _documents() for m in placeholder.findall(text)}
    assert placeholders == {"UPDATE"}
    assert "UPDATE" in flags.FLAGS["checkpoint"].help and "UPDATE" in evaluate.__doc__


def test_every_pip_extra_the_docs_name_exists():
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    setup_call = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup"
    )
    extras_node = next(k.value for k in setup_call.keywords if k.arg == "extras_require")
    extras = {key.value for key in extras_node.keys}
    for path, text in _documents():
        for extra in re.findall(r'pip install -e "\.\[(\w+)\]"', text):
            assert extra in extras, (path, extra)
        if "tensorboard --logdir" in text:  # Not a dependency: say how to get it.
            assert 'pip install -e ".[tensorboard]"' in text, path
