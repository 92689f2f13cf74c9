"""The documentation that is generated from the code matches the code."""

import os

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
