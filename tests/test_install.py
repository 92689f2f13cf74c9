"""What `pip install -e .` (the README's set-up) gives a user's own scripts."""

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _editable_install_of_this_clone() -> bool:
    # The installed distribution's record, not the build's sebulba.egg-info in the clone.
    for distribution in metadata.distributions(name="sebulba"):
        info = json.loads(distribution.read_text("direct_url.json") or "{}")
        path = os.path.realpath(info.get("url", "").removeprefix("file://"))
        if info.get("dir_info", {}).get("editable") and path == ROOT:
            return True
    return False


@pytest.mark.skipif(
    not _editable_install_of_this_clone(),
    reason="needs the README's `pip install -e .` of this clone",
)
def test_a_script_beside_a_clone_named_sebulba_imports_the_package(tmp_path):
    # `git clone .../sebulba` makes a folder named like the package; a script next to it
    # puts that folder first on sys.path, where it would be an empty namespace package.
    os.symlink(ROOT, tmp_path / "sebulba")
    script = tmp_path / "my_script.py"
    script.write_text("import sebulba, sebulba.train\nprint(sebulba.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == os.path.join(ROOT, "sebulba", "__init__.py")
